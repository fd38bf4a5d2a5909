// Package monitoring serves the hub's operational HTTP endpoints: Prometheus
// metrics at /metrics, liveness at /healthz, readiness at /readyz, Go
// profiles under /debug/pprof/, and the JSON debug pages each component
// registers (such as /debug/registryz).
package monitoring
