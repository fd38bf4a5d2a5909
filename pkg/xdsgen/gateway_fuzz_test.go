package xdsgen

import (
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
)

// FuzzRouterResources: any Gateway and VirtualService that validation
// accepts give a router listeners and routes that Envoy's own validation
// accepts (Envoy would refuse the whole update otherwise), and notes, never
// a panic.
func FuzzRouterResources(f *testing.F) {
	f.Add([]byte(`{"selector":{"istio":"gw"},"servers":[{"port":{"number":80,"name":"http","protocol":"HTTP"},"hosts":["*"]}]}`),
		[]byte(`{"hosts":["a.example.com"],"gateways":["gw"],"http":[{"route":[{"destination":{"host":"echo.demo.svc.cluster.local"}}]}]}`))
	f.Add([]byte(`{"servers":[{"port":{"number":443,"name":"h","protocol":"HTTPS"},"hosts":["./a.example.com"],"tls":{"mode":"MUTUAL","credentialName":"x","subjectAltNames":["spiffe://a/b"],"minProtocolVersion":"TLSV1_2"}},
		{"port":{"number":443,"name":"p","protocol":"TLS"},"hosts":["*.example.com"],"tls":{"mode":"PASSTHROUGH"}},{"port":{"number":9000,"name":"t","protocol":"TCP"},"hosts":["*"]}]}`),
		[]byte(`{"hosts":["*.example.com"],"gateways":["demo/gw"],"tls":[{"match":[{"sniHosts":["b.example.com"]}],"route":[{"destination":{"host":"echo"},"weight":50},{"destination":{"host":"other"},"weight":50}]}],
		"tcp":[{"match":[{"port":9000}],"route":[{"destination":{"host":"echo","port":{"number":8080}}}]}]}`))
	services := []*model.MergedService{fleet(true)}
	f.Fuzz(func(t *testing.T, gwSpec, vsSpec []byte) {
		gwMsg, errs := validate.DecodeSpec(validate.KindGateway, gwSpec)
		if len(errs) != 0 || len(validate.Spec(gwMsg)) != 0 {
			t.Skip()
		}
		vsMsg, errs := validate.DecodeSpec(validate.KindVirtualService, vsSpec)
		if len(errs) != 0 || len(validate.Spec(vsMsg)) != 0 {
			t.Skip()
		}
		gw := &istioconfig.Gateway{Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: validate.KindGateway, Namespace: "demo", Name: "gw"}},
			Spec: gwMsg.(*networking.Gateway)}
		vs := &istioconfig.VirtualService{Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: validate.KindVirtualService, Namespace: "demo", Name: "vs"}},
			Spec: vsMsg.(*networking.VirtualService)}
		cfg := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{gw, vs})
		gws := []*istioconfig.Gateway{gw}
		ls, _ := RouterListeners(gws, nil, services, cfg, Options{})
		for _, l := range ls {
			if _, errs := validateDeep(l); len(errs) > 0 {
				t.Fatalf("listener %s: %v\ngateway: %s\nvirtual service: %s", l.GetName(), errs, gwSpec, vsSpec)
			}
			seen := map[string]bool{}
			for _, fc := range l.GetFilterChains() {
				key := strings.Join(fc.GetFilterChainMatch().GetServerNames(), ",")
				if seen[key] {
					t.Fatalf("listener %s has two chains matching %q (Envoy refuses it)", l.GetName(), key)
				}
				seen[key] = true
			}
		}
		for _, rc := range RouterRoutes(gws, nil, services, cfg, Options{}) {
			if _, errs := validateDeep(rc); len(errs) > 0 {
				t.Fatalf("route %s: %v\ngateway: %s\nvirtual service: %s", rc.GetName(), errs, gwSpec, vsSpec)
			}
			domains := map[string]bool{}
			for _, vh := range rc.GetVirtualHosts() {
				for _, d := range vh.GetDomains() {
					if domains[d] {
						t.Fatalf("route %s has domain %q twice (Envoy refuses it)", rc.GetName(), d)
					}
					domains[d] = true
				}
			}
		}
		_ = ConfigNotes(gw, "")
		_ = ConfigNotes(vs, "")
	})
}

// FuzzParseCredentialName: what a proxy asks for by SDS name never
// escapes its parse: a parsed reference names one Secret (no "/" in the
// name), and a namespace only when the name said one.
func FuzzParseCredentialName(f *testing.F) {
	for _, s := range []string{"kubernetes://cert", "kubernetes://ns/cert-cacert", "default", "ROOTCA", "kubernetes://", "kubernetes://a/b/c", "kubernetes:///x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, ok := ParseCredentialName(s)
		if !ok {
			return
		}
		if !strings.HasPrefix(s, sdsSecretPrefix) || ref.Name == "" || strings.Contains(ref.Name, "/") ||
			strings.Contains(ref.Namespace, "/") || (ref.Namespace != "" && !strings.Contains(s[len(sdsSecretPrefix):], "/")) {
			t.Fatalf("ParseCredentialName(%q) = %+v", s, ref)
		}
		for _, name := range ref.Secrets() {
			if name == "" || strings.Contains(name, "/") {
				t.Fatalf("ParseCredentialName(%q) names Secret %q", s, name)
			}
		}
	})
}
