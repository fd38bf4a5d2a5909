package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statusv3 "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// xdsSAN is the extra name the hub's CA port is certified for in
// TestAuthenticatedXDS (--xds-san), as a proxy's discoveryAddress names it.
const xdsSAN = "hub.meshfed.example"

// xdsCaller is what a test caller of the CA port presents.
type xdsCaller struct {
	cert    *tls.Certificate
	token   string
	cluster string // ClusterID metadata
}

func (c xdsCaller) outgoing(ctx context.Context) context.Context {
	if c.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
	}
	if c.cluster != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "ClusterID", c.cluster)
	}
	return ctx
}

// TestAuthenticatedXDS: a hub process with its plaintext xDS port off
// serves ADS and CSDS on its CA's TLS port, certified for istiod's name
// and for --xds-san. A stream with no credentials, a forged token, a token
// of another cluster than the node claims, and a certificate of another
// namespace are refused with their cause and counted; a workload
// certificate and a reviewed token get config; istioctl's way (a config
// cluster token, no ClusterID) reads CSDS.
func TestAuthenticatedXDS(t *testing.T) {
	f := framework.NewTestFleet(t, framework.FleetOptions{Remotes: threeRegionsN(2)})
	ctx := t.Context()
	if err := f.Config().PutRemoteSecret(ctx, "remotes", f.Remotes()...); err != nil {
		t.Fatal(err)
	}
	hub := framework.StartTestHub(t, f, framework.HubOptions{Args: []string{"--xds-san=" + xdsSAN}})
	_, roots := waitTrustBundle(t, hub)
	c1, c2 := f.Remote("cluster-1"), f.Remote("cluster-2")

	t.Run("the plaintext port is off", func(t *testing.T) {
		// The framework passes no --xds-addr: the binary's default. The
		// process listens on its monitoring, gossip, peer and CA ports,
		// and on nothing else.
		var want []int
		for _, a := range []string{strings.TrimPrefix(hub.MonitoringURL(), "http://"), hub.GossipAddr(), hub.PeerAddr(), hub.CAAddr()} {
			_, port, err := net.SplitHostPort(a)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := strconv.Atoi(port)
			want = append(want, p)
		}
		slices.Sort(want)
		got, err := framework.ListeningTCPPorts(hub.PID())
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("the hub listens on TCP ports %v, want only monitoring, gossip, peer and CA %v", got, want)
		}
	})

	// Workload certificates from the hub's own CA, by way of real agents.
	agentCert := func(r *framework.RemoteCluster, ns, sa string) *tls.Certificate {
		t.Helper()
		if err := r.EnsureServiceAccount(ctx, ns, sa); err != nil {
			t.Fatal(err)
		}
		actx, cancel := context.WithTimeout(ctx, converge)
		defer cancel()
		ag, err := r.StartCertAgent(actx, ns, sa, t.TempDir(), framework.CertOptions{CAAddr: hub.CAAddr(), CARoots: roots})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(ag.Stop)
		c, err := ag.Certificate()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	echoCert, otherCert := agentCert(c1, "demo", "echo"), agentCert(c1, "other", "echo")
	tok1, tok2 := serviceAccountToken(t, c1, "demo", "echo", framework.CertAudience), serviceAccountToken(t, c2, "demo", "echo", framework.CertAudience)
	const forged = "eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZGVtbzplY2hvIn0.c2ln"

	// A proxyless node of demo/echo in cluster-1, as pilot-agent's gRPC
	// bootstrap names it.
	echoNode := &corev3.Node{
		Id: xdsnode.SidecarID("10.1.0.1", "echo-0", "demo", "cluster.local"),
		Metadata: xdsnode.Metadata{
			ClusterID: c1.ID, Namespace: "demo", ServiceAccount: "echo", Generator: xdsnode.GeneratorGRPC,
		}.Struct(),
	}
	// stream opens SotW ADS on the CA port, asks for clusters, and returns
	// the first response or the stream's status.
	stream := func(t *testing.T, c xdsCaller, serverName string, n *corev3.Node) (*discoveryv3.DiscoveryResponse, error) {
		t.Helper()
		cc, err := hub.DialAuthenticatedXDS(roots, serverName, c.cert)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		sctx, cancel := context.WithTimeout(ctx, converge)
		defer cancel()
		s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(c.outgoing(sctx))
		if err != nil {
			return nil, err
		}
		// A stream refused at once fails Send with EOF; Recv has the status.
		_ = s.Send(&discoveryv3.DiscoveryRequest{Node: n, TypeUrl: resourcev3.ClusterType})
		return s.Recv()
	}

	for _, tc := range []struct {
		name   string
		caller xdsCaller
		code   codes.Code
		reason string
		cause  string
	}{
		{"no credentials", xdsCaller{}, codes.Unauthenticated, "no_credentials", "no credentials"},
		{"forged token", xdsCaller{token: forged, cluster: "cluster-1"}, codes.Unauthenticated, "token_rejected", "token rejected"},
		{"token of cluster-2, reviewed by the node's cluster-1", xdsCaller{token: tok2}, codes.Unauthenticated, "token_rejected", "cluster cluster-1"},
		{"token of cluster-2 for a node of cluster-1", xdsCaller{token: tok2, cluster: "cluster-2"}, codes.PermissionDenied, "cluster_mismatch", "claims cluster cluster-1"},
		{"certificate of another namespace", xdsCaller{cert: otherCert}, codes.PermissionDenied, "namespace_mismatch", "claims namespace demo"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			before, err := hub.MetricValue(ctx, "meshfed_xds_auth_failures_total", `reason="`+tc.reason+`"`)
			if err != nil {
				t.Fatal(err)
			}
			_, err = stream(t, tc.caller, xdsSAN, echoNode)
			st, _ := status.FromError(err)
			if err == nil || st.Code() != tc.code || !strings.Contains(st.Message(), tc.cause) {
				t.Fatalf("got %v, want %s naming %q", err, tc.code, tc.cause)
			}
			after, err := hub.MetricValue(ctx, "meshfed_xds_auth_failures_total", `reason="`+tc.reason+`"`)
			if err != nil {
				t.Fatal(err)
			}
			if after != before+1 {
				t.Errorf("meshfed_xds_auth_failures_total{reason=%q}: %v, then %v", tc.reason, before, after)
			}
		})
	}

	// istioctl proxy-status's stream: Istio's pkg/adsc node ID defaults,
	// its namespace in the metadata, a token of istio-system/default of
	// the config cluster, and no ClusterID.
	istioctlNode := &corev3.Node{
		Id: "sidecar~10.0.0.9~test-1.default~default.svc.cluster.local",
		Metadata: xdsnode.Metadata{
			Namespace: "istio-system", ServiceAccount: "default", Generator: xdsnode.GeneratorEvent,
		}.Struct(),
	}
	istioctlToken := serviceAccountToken(t, f.Config(), "istio-system", "default", framework.CertAudience)
	for _, tc := range []struct {
		name, serverName string
		caller           xdsCaller
		node             *corev3.Node
	}{
		{"a workload certificate", "istiod.istio-system.svc", xdsCaller{cert: echoCert}, echoNode},
		{"a token of the node's cluster", xdsSAN, xdsCaller{token: tok1, cluster: "cluster-1"}, echoNode},
		{"istioctl's token of the config cluster", xdsSAN, xdsCaller{token: istioctlToken}, istioctlNode},
	} {
		t.Run(tc.name+" gets config", func(t *testing.T) {
			r, err := stream(t, tc.caller, tc.serverName, tc.node)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if r.GetTypeUrl() != resourcev3.ClusterType {
				t.Fatalf("got %s, want clusters", r.GetTypeUrl())
			}
		})
	}

	t.Run("CSDS", func(t *testing.T) {
		fetch := func(c xdsCaller) error {
			cc, err := hub.DialAuthenticatedXDS(roots, xdsSAN, c.cert)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			sctx, cancel := context.WithTimeout(ctx, converge)
			defer cancel()
			_, err = statusv3.NewClientStatusDiscoveryServiceClient(cc).FetchClientStatus(c.outgoing(sctx), &statusv3.ClientStatusRequest{})
			return err
		}
		if err := fetch(xdsCaller{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("no credentials: %v, want Unauthenticated", err)
		}
		// istioctl proxy-status's way: a token of the config cluster and
		// no ClusterID; the config cluster reviews it.
		if err := fetch(xdsCaller{token: istioctlToken}); err != nil {
			t.Errorf("config cluster token: %v", err)
		}
		if err := fetch(xdsCaller{cert: otherCert}); err != nil {
			t.Errorf("a workload certificate of any namespace: %v", err)
		}
	})
}
