package debugauth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	testingclock "k8s.io/utils/clock/testing"
)

// fakeReviewer knows three tokens: "reader" (allowed), "other" (known,
// not allowed), "broken" (the cluster cannot be asked); any other is
// unknown.
type fakeReviewer struct{ calls int }

func (f *fakeReviewer) Review(_ context.Context, token string) (Decision, error) {
	f.calls++
	switch token {
	case "reader":
		return Decision{Authenticated: true, User: "system:serviceaccount:ops:reader", Allowed: true}, nil
	case "other":
		return Decision{Authenticated: true, User: "system:serviceaccount:ops:other", Reason: "user other may not get fleet.meshfed.io"}, nil
	case "broken":
		return Decision{}, errors.New("connection refused")
	}
	return Decision{Reason: "the config cluster does not accept the token"}, nil
}

func newTestGuard() (*Guard, *fakeReviewer, *testingclock.FakePassiveClock, http.Handler) {
	f := &fakeReviewer{}
	clk := testingclock.NewFakePassiveClock(time.Unix(1_000_000, 0))
	g := New(Options{Reviewer: f, Clock: clk, Log: logr.Discard(), Metrics: prometheus.NewRegistry()})
	mux := http.NewServeMux()
	mux.Handle("/debug/", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("the mesh")) })))
	mux.Handle("/ui/", g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("console")) })))
	mux.HandleFunc(LoginPath, g.Login)
	mux.HandleFunc(LogoutPath, g.Logout)
	return g, f, clk, mux
}

func do(h http.Handler, method, path string, hdr map[string]string, body string) *httptest.ResponseRecorder {
	var r *http.Request
	if body != "" {
		r = httptest.NewRequest(method, path, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(method, path, nil)
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestGuardTokens(t *testing.T) {
	g, f, clk, h := newTestGuard()
	for _, tc := range []struct {
		name   string
		hdr    map[string]string
		code   int
		result string
	}{
		{"no credentials", nil, http.StatusUnauthorized, resultUnauthenticated},
		{"not a bearer token", map[string]string{"Authorization": "Basic cmVhZGVy"}, http.StatusUnauthorized, resultUnauthenticated},
		{"unknown token", map[string]string{"Authorization": "Bearer forged"}, http.StatusUnauthorized, resultUnauthenticated},
		{"user not allowed", map[string]string{"Authorization": "Bearer other"}, http.StatusForbidden, resultDenied},
		{"cluster unreachable", map[string]string{"Authorization": "Bearer broken"}, http.StatusServiceUnavailable, resultError},
		{"allowed", map[string]string{"Authorization": "bearer reader"}, http.StatusOK, resultAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := promtest.ToFloat64(g.requests.WithLabelValues(tc.result))
			w := do(h, http.MethodGet, "/debug/registryz", tc.hdr, "")
			if w.Code != tc.code {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.code, w.Body)
			}
			if tc.code == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
			if strings.Contains(w.Body.String(), "reader") || strings.Contains(w.Body.String(), "forged") {
				t.Errorf("the answer quotes the token: %s", w.Body)
			}
			if got := promtest.ToFloat64(g.requests.WithLabelValues(tc.result)) - before; got != 1 {
				t.Errorf("%v counted as %s", got, tc.result)
			}
		})
	}
	// Decisions are kept for the cache's TTL, then asked again.
	calls := f.calls
	do(h, http.MethodGet, "/debug/x", map[string]string{"Authorization": "Bearer reader"}, "")
	if f.calls != calls {
		t.Errorf("a decision of a second ago was asked again")
	}
	clk.SetTime(clk.Now().Add(DefaultCacheTTL))
	do(h, http.MethodGet, "/debug/x", map[string]string{"Authorization": "Bearer reader"}, "")
	if f.calls != calls+1 {
		t.Errorf("an expired decision was not asked again")
	}
	// A browser without a session is sent to sign in, and back after.
	w := do(h, http.MethodGet, "/ui/proxies?cluster=c1", map[string]string{"Accept": "text/html"}, "")
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login?next="+url.QueryEscape("/ui/proxies?cluster=c1") {
		t.Errorf("browser without a session: %d %s", w.Code, w.Header().Get("Location"))
	}
}

func TestGuardSessions(t *testing.T) {
	_, _, clk, h := newTestGuard()
	if w := do(h, http.MethodGet, "/login?next=/ui/", nil, ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `name="token"`) {
		t.Fatalf("login page: %d %s", w.Code, w.Body)
	}
	// Refused tokens start no session and say why.
	for token, code := range map[string]int{"forged": http.StatusUnauthorized, "other": http.StatusForbidden, "": http.StatusUnauthorized} {
		w := do(h, http.MethodPost, "/login", nil, url.Values{"token": {token}, "next": {"/ui/"}}.Encode())
		if w.Code != code || len(w.Result().Cookies()) != 0 {
			t.Errorf("login with %q: %d, cookies %v", token, w.Code, w.Result().Cookies())
		}
	}
	// Another site cannot sign a browser in.
	if w := do(h, http.MethodPost, "/login", map[string]string{"Origin": "https://evil.example"}, "token=reader"); w.Code != http.StatusForbidden {
		t.Errorf("cross-site sign-in: %d", w.Code)
	}
	w := do(h, http.MethodPost, "/login", nil, url.Values{"token": {"reader"}, "next": {"//evil.example/x"}}.Encode())
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/" {
		t.Fatalf("login: %d to %q (an off-site next must become /)", w.Code, w.Header().Get("Location"))
	}
	cookies := w.Result().Cookies()
	if len(cookies) != 1 {
		t.Fatalf("cookies %v", cookies)
	}
	c := cookies[0]
	if c.Name != SessionCookie || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.MaxAge != int(DefaultSessionTTL/time.Second) ||
		strings.Contains(c.Value, "reader") {
		t.Errorf("session cookie %+v", c)
	}
	withCookie := map[string]string{"Cookie": SessionCookie + "=" + c.Value}
	if w := do(h, http.MethodGet, "/ui/", withCookie, ""); w.Code != http.StatusOK {
		t.Errorf("with the session: %d", w.Code)
	}
	// Over TLS (here, a proxy that says so) the cookie is Secure.
	tw := do(h, http.MethodPost, "/login", map[string]string{"X-Forwarded-Proto": "https"}, "token=reader")
	if cs := tw.Result().Cookies(); len(cs) != 1 || !cs[0].Secure {
		t.Errorf("cookie over TLS %+v", cs)
	}
	// A forged or mangled cookie is no session.
	if w := do(h, http.MethodGet, "/debug/x", map[string]string{"Cookie": SessionCookie + "=" + strings.Repeat("A", 43)}, ""); w.Code != http.StatusUnauthorized {
		t.Errorf("forged session: %d", w.Code)
	}
	// Sessions end: by expiry, and by signing out.
	clk.SetTime(clk.Now().Add(DefaultSessionTTL))
	if w := do(h, http.MethodGet, "/debug/x", withCookie, ""); w.Code != http.StatusUnauthorized {
		t.Errorf("expired session: %d", w.Code)
	}
	w = do(h, http.MethodPost, "/login", nil, "token=reader")
	withCookie = map[string]string{"Cookie": SessionCookie + "=" + w.Result().Cookies()[0].Value}
	if w := do(h, http.MethodPost, LogoutPath, withCookie, ""); w.Code != http.StatusSeeOther {
		t.Errorf("logout: %d", w.Code)
	}
	if w := do(h, http.MethodGet, "/debug/x", withCookie, ""); w.Code != http.StatusUnauthorized {
		t.Errorf("after logout: %d", w.Code)
	}
}

func TestRefusedRequestLogsBounded(t *testing.T) {
	var info int
	log := logr.New(&countSink{info: &info})
	g := New(Options{Reviewer: &fakeReviewer{}, Clock: testingclock.NewFakePassiveClock(time.Unix(0, 0)), Log: log})
	h := g.Wrap(http.NotFoundHandler())
	for range 100 {
		do(h, http.MethodGet, "/debug/x", map[string]string{"Authorization": "Bearer forged"}, "")
	}
	if info != 10 {
		t.Errorf("100 refusals in an instant logged %d times at info level, want the burst of 10", info)
	}
}

// countSink counts info-level (V(0)) lines.
type countSink struct{ info *int }

func (s *countSink) Init(logr.RuntimeInfo)          {}
func (s *countSink) Enabled(int) bool               { return true }
func (s *countSink) Error(error, string, ...any)    {}
func (s *countSink) WithValues(...any) logr.LogSink { return s }
func (s *countSink) WithName(string) logr.LogSink   { return s }
func (s *countSink) Info(level int, _ string, _ ...any) {
	if level == 0 {
		*s.info++
	}
}
