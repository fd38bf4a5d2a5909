package xdsgen

import (
	"math"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1alpha3"
)

// DestinationRule connection pools: circuit breakers, TCP keepalive and
// upstream HTTP protocol options.

// poolOptions are the connection pool settings that Envoy takes in a
// cluster's upstream HTTP protocol options rather than in the cluster.
type poolOptions struct {
	upgrade               bool // h2UpgradePolicy UPGRADE
	idleTimeout           *durationpb.Duration
	maxConnectionDuration *durationpb.Duration
	maxRequestsPerConn    uint32
	maxConcurrentStreams  uint32
	keepalive             *networking.ConnectionPoolSettings_HTTPSettings_ConnectionKeepalive
}

// applyConnectionPool applies cp as istiod does, a zero value meaning
// "unset" (the API cannot tell them apart): for Envoy, circuit breakers
// (tcp.maxConnections → max_connections, http.http1MaxPendingRequests →
// max_pending_requests, http.http2MaxRequests → max_requests,
// http.maxRetries → max_retries, the others staying unlimited),
// tcp.connectTimeout and tcp.tcpKeepalive on the cluster and the rest in
// the returned options; for grpc-go, which reads only max_requests of the
// circuit breakers (gRFC A32), only that.
func applyConnectionPool(c *clusterv3.Cluster, cp *networking.ConnectionPoolSettings, k ProxyKind, n notes) poolOptions {
	if cp == nil {
		return poolOptions{}
	}
	if !k.Can().envoy() {
		proxylessPool(c, cp, n)
		return poolOptions{}
	}
	if len(c.GetCircuitBreakers().GetThresholds()) == 0 {
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{unlimitedThresholds()}}
	}
	th := c.GetCircuitBreakers().GetThresholds()[0]
	var po poolOptions
	if h := cp.GetHttp(); h != nil {
		setLimit(&th.MaxRequests, h.GetHttp2MaxRequests())
		setLimit(&th.MaxPendingRequests, h.GetHttp1MaxPendingRequests())
		setLimit(&th.MaxRetries, h.GetMaxRetries())
		po.idleTimeout = h.GetIdleTimeout()
		po.maxRequestsPerConn = positive(h.GetMaxRequestsPerConnection())
		po.maxConcurrentStreams = positive(h.GetMaxConcurrentStreams())
		po.keepalive = h.GetHttp2KeepAlive()
		po.upgrade = h.GetH2UpgradePolicy() == networking.ConnectionPoolSettings_HTTPSettings_UPGRADE
		if h.GetUseClientProtocol() {
			n.at("http.useClientProtocol").addf("not supported yet; dropped")
		}
	}
	if t := cp.GetTcp(); t != nil {
		if t.GetConnectTimeout() != nil {
			c.ConnectTimeout = t.GetConnectTimeout()
		}
		setLimit(&th.MaxConnections, t.GetMaxConnections())
		po.maxConnectionDuration = t.GetMaxConnectionDuration()
		if po.idleTimeout == nil {
			po.idleTimeout = t.GetIdleTimeout()
		}
		if ka := t.GetTcpKeepalive(); ka != nil {
			c.UpstreamConnectionOptions = &clusterv3.UpstreamConnectionOptions{TcpKeepalive: tcpKeepalive(ka)}
		}
	}
	return po
}

// proxylessPool is applyConnectionPool for grpc-go.
func proxylessPool(c *clusterv3.Cluster, cp *networking.ConnectionPoolSettings, n notes) {
	h, t := cp.GetHttp(), cp.GetTcp()
	if v := h.GetHttp2MaxRequests(); v > 0 {
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{
			MaxRequests: wrapperspb.UInt32(uint32(v)),
		}}}
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"http.http1MaxPendingRequests", h.GetHttp1MaxPendingRequests() > 0},
		{"http.maxRequestsPerConnection", h.GetMaxRequestsPerConnection() > 0},
		{"http.maxRetries", h.GetMaxRetries() > 0},
		{"http.idleTimeout", h.GetIdleTimeout() != nil},
		{"http.h2UpgradePolicy", h.GetH2UpgradePolicy() != networking.ConnectionPoolSettings_HTTPSettings_DEFAULT},
		{"http.useClientProtocol", h.GetUseClientProtocol()},
		{"http.maxConcurrentStreams", h.GetMaxConcurrentStreams() > 0},
		{"http.http2KeepAlive", h.GetHttp2KeepAlive() != nil},
		{"tcp.maxConnections", t.GetMaxConnections() > 0},
		{"tcp.connectTimeout", t.GetConnectTimeout() != nil},
		{"tcp.tcpKeepalive", t.GetTcpKeepalive() != nil},
		{"tcp.maxConnectionDuration", t.GetMaxConnectionDuration() != nil},
		{"tcp.idleTimeout", t.GetIdleTimeout() != nil},
	} {
		if f.set {
			n.at(f.name).addf("grpc-go reads only the circuit breakers' max_requests (http.http2MaxRequests); dropped")
		}
	}
}

// setLimit sets *dst to v when v is set (positive).
func setLimit(dst **wrapperspb.UInt32Value, v int32) {
	if v > 0 {
		*dst = wrapperspb.UInt32(uint32(v))
	}
}

// positive is v, or 0 when v is not positive.
func positive(v int32) uint32 {
	if v > 0 {
		return uint32(v)
	}
	return 0
}

// tcpKeepalive is Envoy's SO_KEEPALIVE setting, in whole seconds.
func tcpKeepalive(ka *networking.ConnectionPoolSettings_TCPSettings_TcpKeepalive) *corev3.TcpKeepalive {
	out := &corev3.TcpKeepalive{}
	if ka.GetProbes() > 0 {
		out.KeepaliveProbes = wrapperspb.UInt32(ka.GetProbes())
	}
	if d := ka.GetTime(); d != nil {
		out.KeepaliveTime = wrapperspb.UInt32(seconds(d))
	}
	if d := ka.GetInterval(); d != nil {
		out.KeepaliveInterval = wrapperspb.UInt32(seconds(d))
	}
	return out
}

// seconds is d in whole seconds, clamped to uint32.
func seconds(d *durationpb.Duration) uint32 {
	s := d.AsDuration() / time.Second
	switch {
	case s < 0:
		return 0
	case s > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(s)
}

// protocolOptions are the upstream HTTP protocol options of an Envoy
// cluster: HTTP/2 when http2 or upgrade (with maxConcurrentStreams and
// http2KeepAlive, which only HTTP/2 has), else HTTP/1.1 when a common
// option is set (Envoy requires an upstream protocol); nil when neither.
// Options Envoy would refuse (the spec's validation does not check
// http2KeepAlive) are left out with a reason.
func (po poolOptions) protocolOptions(http2 bool, n notes) *httpv3.HttpProtocolOptions {
	common := &corev3.HttpProtocolOptions{IdleTimeout: po.idleTimeout, MaxConnectionDuration: po.maxConnectionDuration}
	if po.maxRequestsPerConn > 0 {
		common.MaxRequestsPerConnection = wrapperspb.UInt32(po.maxRequestsPerConn)
	}
	hasCommon := !proto.Equal(common, &corev3.HttpProtocolOptions{})
	if !hasCommon {
		common = nil
	}
	if http2 || po.upgrade {
		h2 := &corev3.Http2ProtocolOptions{}
		if po.maxConcurrentStreams > 0 {
			h2.MaxConcurrentStreams = wrapperspb.UInt32(po.maxConcurrentStreams)
		}
		if ka := po.keepalive; ka != nil {
			kas := &corev3.KeepaliveSettings{Interval: ka.GetInterval(), Timeout: ka.GetTimeout()}
			if err := kas.ValidateAll(); err != nil {
				n.at("http.http2KeepAlive").addf("Envoy refuses it (%v); dropped", err)
			} else {
				h2.ConnectionKeepalive = kas
			}
		}
		return explicitHTTP(common, &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: h2},
		})
	}
	if !hasCommon {
		return nil
	}
	return explicitHTTP(common, &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
		ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
	})
}

func explicitHTTP(common *corev3.HttpProtocolOptions, cfg *httpv3.HttpProtocolOptions_ExplicitHttpConfig) *httpv3.HttpProtocolOptions {
	return &httpv3.HttpProtocolOptions{
		CommonHttpProtocolOptions: common,
		UpstreamProtocolOptions:   &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: cfg},
	}
}
