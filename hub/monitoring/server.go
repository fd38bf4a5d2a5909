package monitoring

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure a Server.
type Options struct {
	// Addr is the listen address, e.g. ":15014".
	Addr     string
	Gatherer prometheus.Gatherer
	// Ready reports whether the hub is ready, and if not, why.
	Ready func() (bool, string)
	// Debug maps a path under /debug/ to a function returning a JSON value.
	Debug map[string]func(*http.Request) any
	// Console, when set, serves / and /ui/ (the fleet console).
	Console http.Handler
	// Protect, when set, guards /debug/ (pprof included) and the console:
	// the handlers it returns answer only callers it lets through.
	// /metrics, /healthz and /readyz stay open. Login and Logout serve
	// the console's sign-in and sign-out (with Protect).
	Protect       func(http.Handler) http.Handler
	Login, Logout http.HandlerFunc
	// TLS, when set, serves the port over TLS with it (e.g. asking for
	// mesh client certificates).
	TLS *tls.Config
	Log logr.Logger
}

// Server is the monitoring HTTP server.
type Server struct {
	opts Options
	mux  *http.ServeMux
}

// New returns a Server; Run serves it.
func New(opts Options) *Server {
	s := &Server{opts: opts, mux: http.NewServeMux()}
	protect := opts.Protect
	if protect == nil {
		protect = func(h http.Handler) http.Handler { return h }
	}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.Handle("/debug/pprof/", protect(http.HandlerFunc(pprof.Index)))
	s.mux.Handle("/debug/pprof/profile", protect(http.HandlerFunc(pprof.Profile)))
	s.mux.Handle("/debug/pprof/trace", protect(http.HandlerFunc(pprof.Trace)))
	if opts.Console != nil {
		s.mux.Handle("GET /{$}", protect(opts.Console))
		s.mux.Handle("GET /ui/", protect(opts.Console))
	}
	if opts.Login != nil {
		s.mux.Handle("/login", opts.Login)
	}
	if opts.Logout != nil {
		s.mux.Handle("/logout", opts.Logout)
	}
	for path, fn := range opts.Debug {
		s.mux.Handle("GET /debug/"+path, protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(fn(r))
		})))
	}
	return s
}

// Handler returns the server's handler, for tests.
func (s *Server) Handler() http.Handler { return s.mux }

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if ok, why := s.opts.Ready(); !ok {
		http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ok")
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	lis, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("monitoring: %w", err)
	}
	if s.opts.TLS != nil {
		lis = tls.NewListener(lis, s.opts.TLS)
	}
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	s.opts.Log.Info("serving monitoring", "addr", lis.Addr().String())
	select {
	case <-ctx.Done():
		shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutCtx)
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("monitoring: %w", err)
	}
}
