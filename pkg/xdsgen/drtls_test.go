package xdsgen

import (
	"slices"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// tlsWorld generates both kinds' clusters of ms under dr, with Security,
// and checks them: Envoy and grpc-go validation, grpcAcceptsCluster, and
// MTLSClusters agreeing with the Istio mutual TLS the clusters carry.
func tlsWorld(t *testing.T, ms *model.MergedService, dr *istioconfig.DestinationRule) (grpc, envoy map[string]*clusterv3.Cluster) {
	t.Helper()
	opts := Options{Security: true}
	gl := ServiceClusters(ms, dr, nil, opts)
	el := outboundClusters(ms, dr, nil, opts)
	checkClusters(t, gl, el)
	grpc, envoy = map[string]*clusterv3.Cluster{}, map[string]*clusterv3.Cluster{}
	var gotG, gotE []string
	for _, c := range gl {
		if err := grpcAcceptsCluster(c); err != nil {
			t.Errorf("grpc-go rejects %s: %v", c.GetName(), err)
		}
		if ts := c.GetTransportSocket(); ts != nil {
			ctx := upstreamCtx(t, c)
			if ctx.GetCommonTlsContext().GetTlsCertificateProviderInstance().GetInstanceName() != xdsnode.CertProviderInstance {
				t.Errorf("%s: proxyless TLS without the certificate provider: %v", c.GetName(), ctx)
			}
			gotG = append(gotG, c.GetName())
		}
		grpc[c.GetName()] = c
	}
	for _, c := range el {
		if len(c.GetTransportSocketMatches()) > 0 || isIstioSocket(t, c) {
			gotE = append(gotE, c.GetName())
		}
		envoy[c.GetName()] = c
	}
	if want := MTLSClusters(ProxyGRPC, ms, dr, nil, opts); !slices.Equal(gotG, want) {
		t.Errorf("proxyless clusters with mTLS %v, MTLSClusters %v", gotG, want)
	}
	slices.Sort(gotE)
	if want := MTLSClusters(ProxyEnvoy, ms, dr, nil, opts); !slices.Equal(gotE, want) {
		t.Errorf("Envoy clusters with Istio mTLS %v, MTLSClusters %v", gotE, want)
	}
	return grpc, envoy
}

// upstreamCtx unpacks c's transport socket.
func upstreamCtx(t *testing.T, c *clusterv3.Cluster) *tlsv3.UpstreamTlsContext {
	t.Helper()
	ts := c.GetTransportSocket()
	if ts == nil {
		t.Fatalf("%s: no transport socket", c.GetName())
	}
	if ts.GetName() != transportSocketTLS {
		t.Fatalf("%s: transport socket %q", c.GetName(), ts.GetName())
	}
	var ctx tlsv3.UpstreamTlsContext
	if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		t.Fatalf("%s: %v", c.GetName(), err)
	}
	if err := ctx.ValidateAll(); err != nil {
		t.Errorf("%s: %v", c.GetName(), err)
	}
	return &ctx
}

// isIstioSocket reports whether c's transport socket is Istio mutual TLS
// (pilot-agent's SDS secret "default").
func isIstioSocket(t *testing.T, c *clusterv3.Cluster) bool {
	if c.GetTransportSocket() == nil {
		return false
	}
	sds := upstreamCtx(t, c).GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs()
	return len(sds) == 1 && sds[0].GetName() == SDSDefaultSecret && sds[0].GetSdsConfig().GetApiConfigSource() != nil
}

// sanStrings renders SAN matchers as "<type>:<exact>".
func sanStrings(ms []*tlsv3.SubjectAltNameMatcher) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.GetSanType().String()+":"+m.GetMatcher().GetExact())
	}
	return out
}

// Cluster names of echo's grpc (8080, GRPC) and http (9090, HTTP) ports.
var (
	tlsGRPC   = ClusterName(echoHost, 8080)
	tlsHTTP   = ClusterName(echoHost, 9090)
	tlsGRPCv1 = SubsetClusterName(echoHost, 8080, "v1")
	tlsHTTPv1 = SubsetClusterName(echoHost, 9090, "v1")
)

// TestDRTLSSimple: SIMPLE at each level gives Envoy TLS origination with
// the rule's SNI, CA file and DNS SANs, ALPN by protocol, and leaves the
// proxyless clusters (and MTLSClusters) as auto mTLS decides.
func TestDRTLSSimple(t *testing.T) {
	const simple = "{mode: SIMPLE, sni: api.example.com, caCertificates: /etc/ca.pem, subjectAltNames: [api.example.com, 'spiffe://x/ns/a/sa/b']}"
	for _, tc := range []struct {
		name, spec string
		want       []string // clusters that originate TLS
	}{
		{"top", "trafficPolicy: {tls: " + simple + "}\nsubsets: [{name: v1, labels: {version: v1}}]", []string{tlsGRPC, tlsGRPCv1, tlsHTTP, tlsHTTPv1}},
		{"port", "trafficPolicy: {portLevelSettings: [{port: {number: 9090}, tls: " + simple + "}]}\nsubsets: [{name: v1, labels: {version: v1}}]", []string{tlsHTTP, tlsHTTPv1}},
		{"subset", "subsets: [{name: v1, labels: {version: v1}, trafficPolicy: {tls: " + simple + "}}]", []string{tlsGRPCv1, tlsHTTPv1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Non-injected endpoints: auto mTLS is plaintext for Envoy.
			ms := merged(autoEndpoints(autoV3)...)
			grpc, envoy := tlsWorld(t, ms, mustDR(t, tc.spec))
			for name, c := range envoy {
				if !slices.Contains(tc.want, name) {
					if c.GetTransportSocket() != nil || c.GetTransportSocketMatches() != nil {
						t.Errorf("%s: TLS", name)
					}
					continue
				}
				ctx := upstreamCtx(t, c)
				if ctx.GetSni() != "api.example.com" {
					t.Errorf("%s: sni %q", name, ctx.GetSni())
				}
				wantALPN := []string{"http/1.1"}
				if strings.Contains(name, "|8080|") {
					wantALPN = []string{"h2"}
				}
				common := ctx.GetCommonTlsContext()
				if !slices.Equal(common.GetAlpnProtocols(), wantALPN) {
					t.Errorf("%s: alpn %v, want %v", name, common.GetAlpnProtocols(), wantALPN)
				}
				vc := common.GetValidationContext()
				if vc.GetTrustedCa().GetFilename() != "/etc/ca.pem" {
					t.Errorf("%s: trusted_ca %v", name, vc.GetTrustedCa())
				}
				if got, want := sanStrings(vc.GetMatchTypedSubjectAltNames()), []string{"DNS:api.example.com", "URI:spiffe://x/ns/a/sa/b"}; !slices.Equal(got, want) {
					t.Errorf("%s: SANs %v, want %v", name, got, want)
				}
				if common.GetTlsCertificates() != nil || common.GetTlsCertificateSdsSecretConfigs() != nil {
					t.Errorf("%s: SIMPLE presents a certificate", name)
				}
			}
			// grpc-go: what auto mTLS decides without the tls (v3 refuses
			// mTLS; the empty v1 subset takes it with Security).
			auto := MTLSClusters(ProxyGRPC, ms, mustDR(t, "subsets: [{name: v1, labels: {version: v1}}]"), nil, Options{Security: true})
			if len(auto) == 0 {
				t.Fatal("fixture: no proxyless mTLS")
			}
			for name, c := range grpc {
				if (c.GetTransportSocket() != nil) != slices.Contains(auto, name) {
					t.Errorf("proxyless %s: TLS %t, auto mTLS %v", name, c.GetTransportSocket() != nil, auto)
				}
			}
		})
	}
}

// TestDRTLSMutual: MUTUAL with files presents them; with credentialName
// only it names SDS secrets over ADS (fail-closed).
func TestDRTLSMutual(t *testing.T) {
	ms := merged(autoEndpoints(autoV3)...)
	_, envoy := tlsWorld(t, ms, mustDR(t, "trafficPolicy: {tls: {mode: MUTUAL, clientCertificate: /c.pem, privateKey: /k.pem, caCertificates: /ca.pem, caCrl: /crl.pem}}"))
	ctx := upstreamCtx(t, envoy[tlsHTTP])
	common := ctx.GetCommonTlsContext()
	if certs := common.GetTlsCertificates(); len(certs) != 1 || certs[0].GetCertificateChain().GetFilename() != "/c.pem" || certs[0].GetPrivateKey().GetFilename() != "/k.pem" {
		t.Errorf("certificates %v", certs)
	}
	if ctx.GetSni() != string(echoHost) {
		t.Errorf("sni %q, want the hostname", ctx.GetSni())
	}
	if vc := common.GetValidationContext(); vc.GetTrustedCa().GetFilename() != "/ca.pem" || vc.GetCrl().GetFilename() != "/crl.pem" || vc.GetMatchTypedSubjectAltNames() != nil {
		t.Errorf("validation %v", vc)
	}

	_, envoy = tlsWorld(t, ms, mustDR(t, "trafficPolicy: {tls: {mode: MUTUAL, credentialName: client-secret}}"))
	common = upstreamCtx(t, envoy[tlsGRPC]).GetCommonTlsContext()
	sds := common.GetTlsCertificateSdsSecretConfigs()
	if len(sds) != 1 || sds[0].GetName() != "kubernetes://client-secret" || sds[0].GetSdsConfig().GetAds() == nil {
		t.Errorf("certificate SDS %v", sds)
	}
	if ca := common.GetCombinedValidationContext().GetValidationContextSdsSecretConfig(); ca.GetName() != "kubernetes://client-secret-cacert" || ca.GetSdsConfig().GetAds() == nil {
		t.Errorf("CA SDS %v", ca)
	}
}

// TestDRTLSSimpleWithoutCA: no CA and no insecureSkipVerify means no
// validation context (Envoy refuses SANs without a CA), with notes;
// insecureSkipVerify drops the CA file too.
func TestDRTLSSimpleWithoutCA(t *testing.T) {
	ms := merged(autoEndpoints(autoV3)...)
	for _, spec := range []string{
		"trafficPolicy: {tls: {mode: SIMPLE, subjectAltNames: [a.example.com]}}",
		"trafficPolicy: {tls: {mode: SIMPLE, caCertificates: /ca.pem, insecureSkipVerify: true}}",
	} {
		dr := mustDR(t, spec)
		_, envoy := tlsWorld(t, ms, dr)
		if vc := upstreamCtx(t, envoy[tlsHTTP]).GetCommonTlsContext().GetValidationContextType(); vc != nil {
			t.Errorf("%s: validation %v", spec, vc)
		}
		if strings.Contains(spec, "subjectAltNames") {
			checkNotes(t, ClusterNotes(ProxyEnvoy, dr), []noteWant{
				{ProxyEnvoy, "spec.trafficPolicy.tls.caCertificates", "no system trust store"},
				{ProxyEnvoy, "spec.trafficPolicy.tls.subjectAltNames", "without caCertificates"},
			})
		}
	}
}

// TestDRTLSDisableBeatsAutoMTLS: DISABLE makes the clusters of injected
// endpoints plaintext for both kinds, at each level.
func TestDRTLSDisableBeatsAutoMTLS(t *testing.T) {
	ms := merged(autoEndpoints(autoV1, autoV2)...)
	_, envoy := tlsWorld(t, ms, mustDR(t, "subsets: [{name: v1, labels: {version: v1}}]"))
	if len(envoy[tlsHTTP].GetTransportSocketMatches()) == 0 {
		t.Fatal("fixture: no auto mTLS")
	}
	for _, tc := range []struct {
		name, spec string
		plain      []string
	}{
		{"top", "trafficPolicy: {tls: {mode: DISABLE}}\nsubsets: [{name: v1, labels: {version: v1}}]", []string{tlsGRPC, tlsGRPCv1, tlsHTTP, tlsHTTPv1}},
		{"port", "trafficPolicy: {portLevelSettings: [{port: {number: 8080}, tls: {mode: DISABLE}}]}\nsubsets: [{name: v1, labels: {version: v1}}]", []string{tlsGRPC, tlsGRPCv1}},
		{"subset", "subsets: [{name: v1, labels: {version: v1}, trafficPolicy: {tls: {mode: DISABLE}}}]", []string{tlsGRPCv1, tlsHTTPv1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			grpc, envoy := tlsWorld(t, ms, mustDR(t, tc.spec))
			for name := range envoy {
				plain := slices.Contains(tc.plain, name)
				if e := envoy[name]; plain != (e.GetTransportSocket() == nil && e.GetTransportSocketMatches() == nil) {
					t.Errorf("Envoy %s: plaintext %t, want %t", name, !plain, plain)
				}
				if g := grpc[name]; plain != (g.GetTransportSocket() == nil) {
					t.Errorf("proxyless %s: plaintext %t, want %t", name, !plain, plain)
				}
			}
		})
	}
}

// TestDRTLSIstioMutual: ISTIO_MUTUAL forces mTLS to non-injected
// endpoints: Envoy gets one transport_socket (no matches) with the rule's
// SNI and SANs, or the defaults; proxyless the provider context.
func TestDRTLSIstioMutual(t *testing.T) {
	ms := merged(autoEndpoints(autoV3)...)
	grpc, envoy := tlsWorld(t, ms, mustDR(t, `
trafficPolicy:
  tls: {mode: ISTIO_MUTUAL}
  portLevelSettings: [{port: {number: 9090}, tls: {mode: ISTIO_MUTUAL, sni: echo.internal, subjectAltNames: ['spiffe://cluster.local/ns/demo/sa/other']}}]`))
	for _, name := range []string{tlsGRPC, tlsHTTP} {
		if envoy[name].GetTransportSocketMatches() != nil {
			t.Errorf("%s: transport_socket_matches", name)
		}
		ctx := upstreamCtx(t, envoy[name])
		wantSNI, wantSANs := SidecarSNI(echoHost, 8080), []string{"URI:" + SpiffeID("", "demo", "echo")}
		if name == tlsHTTP {
			wantSNI, wantSANs = "echo.internal", []string{"URI:spiffe://cluster.local/ns/demo/sa/other"}
		}
		if ctx.GetSni() != wantSNI {
			t.Errorf("%s: sni %q, want %q", name, ctx.GetSni(), wantSNI)
		}
		if got := sanStrings(ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext().GetMatchTypedSubjectAltNames()); !slices.Equal(got, wantSANs) {
			t.Errorf("%s: SANs %v, want %v", name, got, wantSANs)
		}
		g := upstreamCtx(t, grpc[name])
		if got := sanStrings(g.GetCommonTlsContext().GetValidationContext().GetMatchTypedSubjectAltNames()); !slices.Equal(got, wantSANs) {
			t.Errorf("proxyless %s: SANs %v, want %v", name, got, wantSANs)
		}
		if name == tlsHTTP && g.GetSni() != "echo.internal" {
			t.Errorf("proxyless %s: sni %q", name, g.GetSni())
		}
	}
	// Without SNI or SANs the proxyless socket is auto mTLS's own.
	h, port, _, _ := ParseSubsetClusterName(tlsGRPC)
	if !proto.Equal(grpc[tlsGRPC].GetTransportSocket(), meshUpstreamTLS([]string{SpiffeID("", "demo", "echo")}, SNIClusterName(h, port, ""))) {
		t.Errorf("proxyless %s: not auto mTLS's socket", tlsGRPC)
	}
}

// TestDRTLSDNSExternal: SIMPLE on a MESH_EXTERNAL DNS service gives the
// Envoy STRICT_DNS cluster the TLS socket; proxyless stays plaintext, and
// ISTIO_MUTUAL still applies to such a service.
func TestDRTLSDNSExternal(t *testing.T) {
	ms := dnsMerged(model.ResolutionDNS)
	ms.Service.External = true
	grpc, envoy := tlsWorld(t, ms, mustDR(t, "trafficPolicy: {tls: {mode: SIMPLE, caCertificates: /etc/ssl/certs/ca-certificates.crt}}"))
	c := envoy[tlsHTTP]
	if c.GetType() != clusterv3.Cluster_STRICT_DNS {
		t.Errorf("%s: type %v", c.GetName(), c.GetType())
	}
	if ctx := upstreamCtx(t, c); ctx.GetSni() != string(echoHost) || ctx.GetCommonTlsContext().GetValidationContext().GetTrustedCa().GetFilename() == "" {
		t.Errorf("%s: %v", c.GetName(), ctx)
	}
	if grpc[tlsHTTP].GetTransportSocket() != nil {
		t.Errorf("proxyless: TLS")
	}
	checkNotes(t, ClusterNotes(ProxyGRPC, mustDR(t, "trafficPolicy: {tls: {mode: SIMPLE}}")), []noteWant{
		{ProxyGRPC, "spec.trafficPolicy.tls.mode", "SIMPLE: grpc-go takes TLS only from bootstrap certificate providers"},
	})

	grpc, envoy = tlsWorld(t, ms, mustDR(t, "trafficPolicy: {tls: {mode: ISTIO_MUTUAL}}"))
	if !isIstioSocket(t, envoy[tlsHTTP]) || grpc[tlsHTTP].GetTransportSocket() == nil {
		t.Errorf("ISTIO_MUTUAL not applied to the external DNS service")
	}
}

// TestDRTLSNotes: the notes of each mode and kind; no "not supported yet".
func TestDRTLSNotes(t *testing.T) {
	dr := mustDR(t, `
trafficPolicy:
  tls: {mode: MUTUAL, credentialName: s}
subsets:
- name: v1
  trafficPolicy: {tls: {mode: ISTIO_MUTUAL, sni: x.example.com}}`)
	checkNotes(t, ClusterNotes(ProxyEnvoy, dr), []noteWant{
		{ProxyEnvoy, "spec.trafficPolicy.tls.credentialName", "to proxies on the authenticated port (15012) only"},
	})
	checkNotes(t, ClusterNotes(ProxyGRPC, dr), []noteWant{
		{ProxyGRPC, "spec.trafficPolicy.tls.mode", "MUTUAL: grpc-go takes TLS only from bootstrap certificate providers"},
		{ProxyGRPC, "spec.subsets[0].trafficPolicy.tls.sni", "GRPC_EXPERIMENTAL_XDS_SNI"},
	})
	for _, k := range []ProxyKind{ProxyGRPC, ProxyEnvoy} {
		if got := ClusterNotes(k, mustDR(t, "trafficPolicy: {tls: {mode: DISABLE}}")); len(got) != 0 {
			t.Errorf("%v: DISABLE notes %v", k, got)
		}
	}
}

// fuzzTLSSeeds are FuzzDestinationRuleClusters seeds with tls settings.
var fuzzTLSSeeds = []string{
	`{"host":"echo","trafficPolicy":{"tls":{"mode":"SIMPLE","sni":"a.example.com","caCertificates":"/ca.pem","subjectAltNames":["a.example.com","10.0.0.1","spiffe://td/ns/a/sa/b"],"caCrl":"/crl.pem"}}}`,
	`{"host":"echo","trafficPolicy":{"tls":{"mode":"MUTUAL","clientCertificate":"/c.pem","privateKey":"/k.pem","credentialName":"s"}}}`,
	`{"host":"echo","trafficPolicy":{"tls":{"mode":"MUTUAL","credentialName":"s","caCertCredentialName":"ca"}}}`,
	`{"host":"echo","trafficPolicy":{"tls":{"mode":"SIMPLE","insecureSkipVerify":true,"subjectAltNames":["x"]},"portLevelSettings":[{"port":{"number":8080},"tls":{"mode":"ISTIO_MUTUAL","sni":"s"}}]},"subsets":[{"name":"v1","labels":{"version":"v1"},"trafficPolicy":{"tls":{"mode":"DISABLE"}}}]}`,
	`{"host":"echo","subsets":[{"name":"v1","labels":{"version":"v1"},"trafficPolicy":{"portLevelSettings":[{"port":{"number":9090},"tls":{"mode":"MUTUAL","clientCertificate":"/c","privateKey":"/k"}}]}}]}`,
}

// TestFuzzTLSSeedsAreValid keeps the TLS seeds meaningful.
func TestFuzzTLSSeedsAreValid(t *testing.T) {
	for _, s := range fuzzTLSSeeds {
		if _, err := decodeDR([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
}
