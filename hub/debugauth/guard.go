package debugauth

import (
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
)

// Options configure a Guard.
type Options struct {
	// Reviewer decides about tokens (KubeReviewer in the hub). Required.
	Reviewer Reviewer
	// Identities are the workload identities (SPIFFE IDs) whose mesh
	// client certificate, verified against Roots, is let through instead
	// of a token: the port must be served over TLS asking for client
	// certificates. Empty: certificates are not a credential.
	Identities []string
	// Roots returns the mesh roots (PEM) client certificates chain to.
	Roots func() []byte
	// CacheTTL is how long a decision is kept; default DefaultCacheTTL.
	CacheTTL time.Duration
	// SessionTTL is how long a console session lasts; default
	// DefaultSessionTTL.
	SessionTTL time.Duration
	// Clock times the cache, the sessions and the log limit; default the
	// real clock.
	Clock   clock.PassiveClock
	Log     logr.Logger
	Metrics prometheus.Registerer
}

// Defaults.
const (
	DefaultCacheTTL   = 10 * time.Second
	DefaultSessionTTL = 8 * time.Hour
	// SessionCookie names the console's session cookie.
	SessionCookie = "meshfed_session"
	// LoginPath and LogoutPath are the console's sign-in and sign-out.
	LoginPath  = "/login"
	LogoutPath = "/logout"
	// maxSessions bounds the sessions held; the oldest go first.
	maxSessions = 10_000
	// maxTokenBytes bounds a token read from a header or the login form.
	maxTokenBytes = 16 << 10
)

// Results counted in meshfed_debug_requests_total.
const (
	resultAllowed         = "allowed"
	resultUnauthenticated = "unauthenticated"
	resultDenied          = "denied"
	resultError           = "error"
)

// Guard authenticates and authorizes the requests of the monitoring port's
// protected paths. It is safe for concurrent use.
type Guard struct {
	opts     Options
	reviewer *cachingReviewer
	log      *rate.Limiter
	requests *prometheus.CounterVec
	reviews  *prometheus.CounterVec

	mu       sync.Mutex
	sessions map[string]session
}

// session is one signed-in console user: the token stays here.
type session struct {
	token   string
	user    string
	expires time.Time
}

// New returns a Guard whose metrics are registered on opts.Metrics.
func New(opts Options) *Guard {
	if opts.CacheTTL == 0 {
		opts.CacheTTL = DefaultCacheTTL
	}
	if opts.SessionTTL == 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	g := &Guard{
		opts: opts,
		log:  rate.NewLimiter(1, 10),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_debug_requests_total",
			Help: "Requests of the monitoring port's protected paths (/debug, the console, pprof), by result: allowed, unauthenticated, denied, error (the config cluster could not be asked).",
		}, []string{"result"}),
		reviews: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_debug_token_reviews_total",
			Help: "Token decisions of the monitoring port, by cache: hit (kept from a review in the last 10 s), miss (a TokenReview and a SubjectAccessReview of the config cluster).",
		}, []string{"cache"}),
		sessions: map[string]session{},
	}
	g.reviewer = newCachingReviewer(opts.Reviewer, opts.CacheTTL, opts.Clock, func(c string) { g.reviews.WithLabelValues(c).Inc() })
	if opts.Metrics != nil {
		opts.Metrics.MustRegister(g.requests, g.reviews)
	}
	return g
}

// Wrap returns next guarded: a request without credentials is answered
// 401 (a browser asking for a page is sent to the login page), one whose
// token the config cluster does not accept 401, one whose user may not
// read the fleet 403, and 503 when the config cluster cannot be asked.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := g.certificateIdentity(r); ok {
			if slices.Contains(g.opts.Identities, id) {
				g.requests.WithLabelValues(resultAllowed).Inc()
				next.ServeHTTP(w, r)
				return
			}
			if _, bearer := BearerToken(r.Header.Get("Authorization")); !bearer {
				g.refuse(w, r, http.StatusForbidden, resultDenied, "identity "+id+" is not one that --debug-identities lists")
				return
			}
		}
		token, fromSession := g.credentials(r)
		if token == "" {
			g.refuse(w, r, http.StatusUnauthorized, resultUnauthenticated, errNoToken.Error())
			return
		}
		d, err := g.reviewer.Review(r.Context(), token)
		switch {
		case err != nil:
			g.refuse(w, r, http.StatusServiceUnavailable, resultError, "the config cluster cannot review the token now: "+err.Error())
		case !d.Authenticated:
			if fromSession {
				g.dropSession(r)
			}
			g.refuse(w, r, http.StatusUnauthorized, resultUnauthenticated, d.Reason)
		case !d.Allowed:
			g.refuse(w, r, http.StatusForbidden, resultDenied, d.Reason)
		default:
			g.requests.WithLabelValues(resultAllowed).Inc()
			next.ServeHTTP(w, r)
		}
	})
}

// certificateIdentity returns the SPIFFE ID of the request's client
// certificate when it chains to the mesh roots (only when Identities are
// configured: otherwise certificates are no credential).
func (g *Guard) certificateIdentity(r *http.Request) (string, bool) {
	if len(g.opts.Identities) == 0 || g.opts.Roots == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "", false
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(g.opts.Roots()) {
		return "", false
	}
	leaf := r.TLS.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		CurrentTime: g.opts.Clock.Now()}); err != nil {
		return "", false
	}
	for _, u := range leaf.URIs {
		if u.Scheme == "spiffe" {
			return u.String(), true
		}
	}
	return "", false
}

// credentials returns the request's token: its bearer token, else its
// session's.
func (g *Guard) credentials(r *http.Request) (token string, fromSession bool) {
	if t, ok := BearerToken(r.Header.Get("Authorization")); ok {
		return t, false
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return "", false
	}
	id, ok := ParseSessionID(c.Value)
	if !ok {
		return "", false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.sessions[id]
	if !ok || !g.opts.Clock.Now().Before(s.expires) {
		delete(g.sessions, id)
		return "", false
	}
	return s.token, true
}

// BearerToken reads "Bearer <token>" (the scheme case-insensitive); it
// refuses an empty, oversized or multi-word token.
func BearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	if token == "" || len(token) > maxTokenBytes || strings.ContainsAny(token, " \t\r\n") {
		return "", false
	}
	return token, true
}

// sessionIDBytes is the entropy of a session ID.
const sessionIDBytes = 32

// ParseSessionID checks a session cookie's value: the base64url (no
// padding) of sessionIDBytes random bytes.
func ParseSessionID(v string) (string, bool) {
	if len(v) != base64.RawURLEncoding.EncodedLen(sessionIDBytes) {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(b) != sessionIDBytes {
		return "", false
	}
	return v, true
}

// refuse answers a refused request, counts it and logs it at most once a
// second (after a burst), the rest at debug level; never the token.
func (g *Guard) refuse(w http.ResponseWriter, r *http.Request, code int, result, why string) {
	g.requests.WithLabelValues(result).Inc()
	log := g.opts.Log.V(1)
	if g.log.AllowN(g.opts.Clock.Now(), 1) {
		log = g.opts.Log
	}
	log.Info("monitoring request refused", "path", r.URL.Path, "remote", r.RemoteAddr, "status", code, "reason", why)
	if code == http.StatusUnauthorized && r.Method == http.MethodGet && wantsHTML(r) {
		http.Redirect(w, r, LoginPath+"?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	if code == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="meshfed"`)
	}
	http.Error(w, http.StatusText(code)+": "+why, code)
}

// wantsHTML tells a browser's page request from a program's.
func wantsHTML(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// Login serves the console's sign-in page (GET) and takes a token once
// (POST, form field "token"): a token the config cluster accepts and whose
// user may read the fleet starts a session, kept in a cookie, and the
// browser goes on to next (a path of this server). The token is never
// written back or logged.
func (g *Guard) Login(w http.ResponseWriter, r *http.Request) {
	next := r.URL.Query().Get("next")
	if r.Method == http.MethodPost {
		next = r.PostFormValue("next")
	}
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.Contains(next, `\`) {
		next = "/"
	}
	if r.Method != http.MethodPost {
		g.loginPage(w, next, "", http.StatusOK)
		return
	}
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r) {
		http.Error(w, "Forbidden: the sign-in came from another site", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 2*maxTokenBytes)
	token := strings.TrimSpace(r.PostFormValue("token"))
	if token == "" || len(token) > maxTokenBytes {
		g.loginPage(w, next, "Paste a Kubernetes token (kubectl create token …).", http.StatusUnauthorized)
		return
	}
	d, err := g.reviewer.Review(r.Context(), token)
	switch {
	case err != nil:
		g.requests.WithLabelValues(resultError).Inc()
		g.loginPage(w, next, "The config cluster cannot review tokens now; try again.", http.StatusServiceUnavailable)
		return
	case !d.Authenticated:
		g.requests.WithLabelValues(resultUnauthenticated).Inc()
		g.loginPage(w, next, d.Reason, http.StatusUnauthorized)
		return
	case !d.Allowed:
		g.requests.WithLabelValues(resultDenied).Inc()
		g.loginPage(w, next, d.Reason, http.StatusForbidden)
		return
	}
	id, err := g.newSession(token, d.User)
	if err != nil {
		http.Error(w, "cannot start a session", http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: id, Path: "/", MaxAge: int(g.opts.SessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r),
	})
	g.opts.Log.Info("console session started", "user", d.User, "remote", r.RemoteAddr)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// Logout ends the request's session (POST).
func (g *Guard) Logout(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	g.dropSession(r)
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: overTLS(r)})
	http.Redirect(w, r, LoginPath, http.StatusSeeOther)
}

func (g *Guard) newSession(token, user string) (string, error) {
	b := make([]byte, sessionIDBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b)
	now := g.opts.Clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.sessions) >= maxSessions {
		var oldest string
		var at time.Time
		for k, s := range g.sessions {
			if !now.Before(s.expires) {
				delete(g.sessions, k)
				continue
			}
			if oldest == "" || s.expires.Before(at) {
				oldest, at = k, s.expires
			}
		}
		if len(g.sessions) >= maxSessions {
			delete(g.sessions, oldest)
		}
	}
	g.sessions[id] = session{token: token, user: user, expires: now.Add(g.opts.SessionTTL)}
	return id, nil
}

func (g *Guard) dropSession(r *http.Request) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		g.mu.Lock()
		delete(g.sessions, c.Value)
		g.mu.Unlock()
	}
}

// overTLS tells whether the browser reached the hub over TLS (directly or
// through a proxy that says so): only then is the cookie marked Secure,
// which a browser would not send back over plain HTTP.
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

var loginTemplate = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>meshfed: sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><main>
<h1>Sign in to the fleet console</h1>
<p>Paste a Kubernetes token of the config cluster whose user may <code>get</code> <code>fleet.meshfed.io</code> (the ClusterRole <code>meshfed-fleet-reader</code>), e.g. <code>kubectl create token &lt;service account&gt;</code>. It is checked once and kept on the hub for this session; your browser holds only a session cookie.</p>
{{with .Error}}<p role="alert" id="login-error">{{.}}</p>{{end}}
<form method="post" action="/login">
<input type="hidden" name="next" value="{{.Next}}">
<label>Token <input type="password" name="token" id="token" autocomplete="off" required></label>
<button type="submit" id="sign-in">Sign in</button>
</form>
</main></body></html>
`))

func (g *Guard) loginPage(w http.ResponseWriter, next, msg string, code int) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = loginTemplate.Execute(w, struct{ Next, Error string }{next, msg})
}
