package xds

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	grpcstatus "google.golang.org/grpc/status"
	"k8s.io/utils/clock"
)

// Limits bound what clients can take of a replica's xDS ports, together:
// the plaintext port and the authenticated one on the CA's port share them.
// Zero values take the defaults below.
type Limits struct {
	// MaxStreams caps the ADS streams (SotW and Delta) open at once.
	MaxStreams int
	// StreamRate and StreamBurst bound how fast new ADS streams are
	// accepted: StreamRate a second on average, StreamBurst at once (a
	// reconnect storm after a replica restart fits in the burst).
	StreamRate  float64
	StreamBurst int
	// HandshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface: a client that connects and stays silent is cut then.
	HandshakeTimeout time.Duration
}

// Defaults of Limits: far above what one replica serves in the scale
// envelope (thousands of proxies), so that only abuse meets them.
const (
	DefaultMaxStreams       = 20000
	DefaultStreamRate       = 500
	DefaultStreamBurst      = 2000
	DefaultHandshakeTimeout = 10 * time.Second
)

func (l Limits) withDefaults() Limits {
	if l.MaxStreams <= 0 {
		l.MaxStreams = DefaultMaxStreams
	}
	if l.StreamRate <= 0 {
		l.StreamRate = DefaultStreamRate
	}
	if l.StreamBurst <= 0 {
		l.StreamBurst = DefaultStreamBurst
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = DefaultHandshakeTimeout
	}
	return l
}

// Reasons of meshfed_xds_streams_refused_total.
const (
	reasonStreamLimit = "stream_limit"
	reasonStreamRate  = "stream_rate"
	// reasonMessageTooLarge: a request over MaxRequestBytes ended its
	// stream (grpc-go refuses it with RESOURCE_EXHAUSTED before decoding).
	reasonMessageTooLarge = "message_too_large"
)

// MaxRequestBytes is the largest xDS request a replica reads: room for a
// NACK's error detail and a Delta subscription of thousands of names.
const MaxRequestBytes = 4 << 20

// requestWindowBytes is the HTTP/2 flow-control window of each stream and
// connection of an xDS port (see GRPCOptions): a request larger than it
// (up to MaxRequestBytes) still arrives, in window-sized turns.
const requestWindowBytes = 1 << 20

// Admission admits ADS streams under Limits: a stream beyond the cap or
// the rate is refused at once with RESOURCE_EXHAUSTED and a message that
// says which limit, and counted; the streams already open are untouched.
// CSDS calls and other services are not limited (operators' tools must get
// through while proxies flood a port).
type Admission struct {
	limits  Limits
	clk     clock.PassiveClock
	rate    *rate.Limiter
	open    atomic.Int64
	refused *prometheus.CounterVec
	gauge   prometheus.GaugeFunc
}

// NewAdmission returns an Admission over l on clk, registering its
// metrics with reg (none when reg is nil).
func NewAdmission(l Limits, clk clock.PassiveClock, reg prometheus.Registerer) *Admission {
	if clk == nil {
		clk = clock.RealClock{}
	}
	l = l.withDefaults()
	a := &Admission{
		limits: l,
		clk:    clk,
		rate:   rate.NewLimiter(rate.Limit(l.StreamRate), l.StreamBurst),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_xds_streams_refused_total",
			Help: "ADS streams refused with RESOURCE_EXHAUSTED, by reason: stream_limit and stream_rate before any request was read, message_too_large for a request over 4 MiB (it ends its stream).",
		}, []string{"reason"}),
	}
	a.gauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshfed_xds_streams_open",
		Help: "ADS streams open on this replica's xDS ports, against the cap --xds-max-streams.",
	}, func() float64 { return float64(a.open.Load()) })
	for _, r := range []string{reasonStreamLimit, reasonStreamRate, reasonMessageTooLarge} {
		a.refused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(a.refused, a.gauge)
	}
	return a
}

// Limits returns the limits in force (defaults filled in).
func (a *Admission) Limits() Limits { return a.limits }

// ServerOptions are the options of a gRPC server that serves ADS under a:
// the admission interceptor and the handshake timeout, with the keepalive
// policy and message size of GRPCOptions.
func (a *Admission) ServerOptions() []grpc.ServerOption {
	return append(GRPCOptions(),
		grpc.ChainStreamInterceptor(a.intercept),
		grpc.ConnectionTimeout(a.limits.HandshakeTimeout),
	)
}

// adsPrefix is the method prefix of ADS, SotW and Delta.
const adsPrefix = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"

func (a *Admission) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if !strings.HasPrefix(info.FullMethod, adsPrefix) {
		return handler(srv, ss)
	}
	if n := a.open.Add(1); n > int64(a.limits.MaxStreams) {
		a.open.Add(-1)
		a.refused.WithLabelValues(reasonStreamLimit).Inc()
		return grpcstatus.Error(codes.ResourceExhausted,
			fmt.Sprintf("xds: this replica has %d ADS streams open, its limit: retry later or at another replica", a.limits.MaxStreams))
	}
	defer a.open.Add(-1)
	if !a.rate.AllowN(a.clk.Now(), 1) {
		a.refused.WithLabelValues(reasonStreamRate).Inc()
		return grpcstatus.Error(codes.ResourceExhausted,
			fmt.Sprintf("xds: more than %g new ADS streams a second (burst %d) on this replica: retry with backoff", a.limits.StreamRate, a.limits.StreamBurst))
	}
	return handler(srv, sizeWatch{ServerStream: ss, a: a})
}

// sizeWatch counts the requests of one stream that grpc-go refused as
// larger than MaxRequestBytes: the stream ends with that status, which the
// client sees; every other stream goes on.
type sizeWatch struct {
	grpc.ServerStream
	a *Admission
}

func (s sizeWatch) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err != nil && grpcstatus.Code(err) == codes.ResourceExhausted {
		s.a.refused.WithLabelValues(reasonMessageTooLarge).Inc()
	}
	return err
}

// GRPCOptions are the server options xDS streams need: a keepalive policy
// that lets proxies ping (pilot-agent and Envoy keep their control-plane
// connection alive with pings that grpc-go's default policy punishes),
// room for large requests (a NACK's error, a Delta subscription of
// thousands of names), and fixed flow-control windows. Admission.ServerOptions
// adds the limits.
//
// The windows are set, rather than left to grpc-go's bandwidth estimate,
// because the estimate pings the client after every message it reads while
// no ping is out: with a proxy's ACK after every response, that is a ping
// and its answer per response on every stream (BenchmarkScale at 100
// proxies: 5.8 read and write system calls per proxy update before, 4.0
// after, and 7 % less CPU). A proxy's requests are small, and the windows
// bound what it may send unread.
func GRPCOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(1 << 20),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.InitialWindowSize(requestWindowBytes),
		grpc.InitialConnWindowSize(requestWindowBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
	}
}
