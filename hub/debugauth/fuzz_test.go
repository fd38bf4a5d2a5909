package debugauth

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzSessionCookie: whatever a browser (or anyone) sends as the session
// cookie, the guard answers 401 for it (no session was started here) and
// never panics; ParseSessionID accepts only the shape sessions have.
func FuzzSessionCookie(f *testing.F) {
	f.Add(strings.Repeat("A", 43))
	f.Add("")
	f.Add("meshfed; other=1")
	f.Add(strings.Repeat("_-", 22))
	_, _, _, h := newTestGuard()
	f.Fuzz(func(t *testing.T, v string) {
		if id, ok := ParseSessionID(v); ok && (len(id) != 43 || strings.ContainsAny(id, "+/=")) {
			t.Fatalf("ParseSessionID accepted %q", v)
		}
		r, err := http.NewRequest(http.MethodGet, "http://hub/debug/registryz", nil)
		if err != nil {
			t.Skip()
		}
		r.Header.Set("Cookie", SessionCookie+"="+v)
		w := newRecorder()
		h.ServeHTTP(w, r)
		if w.code != http.StatusUnauthorized {
			t.Fatalf("cookie %q: %d", v, w.code)
		}
	})
}

// FuzzBearerToken: whatever an Authorization header says, the guard asks
// the reviewer only about a single-word token of bounded size, and answers
// it with a status, never the token.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer reader", "bearer  other ", "Basic x", "Bearer a b", "Bearer " + strings.Repeat("x", maxTokenBytes+1), "Bearer\tx"} {
		f.Add(s)
	}
	_, _, _, h := newTestGuard()
	f.Fuzz(func(t *testing.T, header string) {
		tok, ok := BearerToken(header)
		if ok && (tok == "" || len(tok) > maxTokenBytes || strings.ContainsAny(tok, " \t\r\n")) {
			t.Fatalf("BearerToken(%q) = %q", header, tok)
		}
		r, err := http.NewRequest(http.MethodGet, "http://hub/debug/registryz", nil)
		if err != nil {
			t.Skip()
		}
		r.Header.Set("Authorization", header)
		w := newRecorder()
		h.ServeHTTP(w, r)
		if w.code == 0 || (ok && len(tok) > 8 && strings.Contains(w.body.String(), tok)) {
			t.Fatalf("header %q: %d %q", header, w.code, w.body.String())
		}
	})
}

// recorder is a minimal ResponseWriter (httptest's wants a *testing.T-free
// use here too).
type recorder struct {
	hdr  http.Header
	code int
	body strings.Builder
}

func newRecorder() *recorder { return &recorder{hdr: http.Header{}} }

func (r *recorder) Header() http.Header { return r.hdr }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(code int) { r.code = code }
