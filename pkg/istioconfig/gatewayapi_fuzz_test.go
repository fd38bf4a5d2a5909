package istioconfig_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
)

// FuzzGatewayAPITranslation: whatever Gateway and routes the config
// cluster holds (its CRDs' schemas aside: the hub reads what the
// apiserver stored), the translation does not panic, every VirtualService
// it makes passes validation, and every status names only the parents
// the route has.
func FuzzGatewayAPITranslation(f *testing.F) {
	f.Add([]byte(`{"gatewayClassName":"istio","listeners":[{"name":"http","port":80,"protocol":"HTTP","allowedRoutes":{"namespaces":{"from":"All"}}},
		{"name":"tls","port":443,"protocol":"TLS","tls":{"mode":"Passthrough"}},{"name":"s","port":8443,"protocol":"HTTPS","tls":{"certificateRefs":[{"name":"c","namespace":"o"}]}}]}`),
		[]byte(`{"parentRefs":[{"name":"web","namespace":"ingress","sectionName":"http"}],"hostnames":["a.example.com"],"rules":[{"matches":[{"path":{"type":"RegularExpression","value":"/x.*"},
		"headers":[{"name":"H","value":"v","type":"RegularExpression"}],"queryParams":[{"name":"q","value":"1"}],"method":"GET"}],
		"filters":[{"type":"RequestRedirect","requestRedirect":{"scheme":"https","statusCode":301,"path":{"type":"ReplaceFullPath","replaceFullPath":"/y"}}},
		{"type":"URLRewrite","urlRewrite":{"hostname":"b","path":{"type":"ReplacePrefixMatch","replacePrefixMatch":"/z"}}}],
		"backendRefs":[{"name":"a","port":80,"weight":0},{"name":"b","namespace":"o","port":81,"weight":3}],"timeouts":{"request":"5s"}}]}`),
		[]byte(`{"parentRefs":[{"name":"web","namespace":"ingress"}],"hostnames":["*.example.com"],"rules":[{"backendRefs":[{"name":"t","port":9443}]}]}`))
	f.Fuzz(func(t *testing.T, gwSpec, httpSpec, tlsSpec []byte) {
		meta := func(kind, ns, name string) istioconfig.Meta {
			return istioconfig.Meta{Key: istioconfig.Key{Kind: kind, Namespace: ns, Name: name}, Generation: 1, Created: time.Unix(0, 0)}
		}
		gw := &istioconfig.KubeGateway{Meta: meta(validate.KindKubeGateway, "ingress", "web")}
		hr := &istioconfig.HTTPRoute{Meta: meta(validate.KindHTTPRoute, "demo", "r")}
		gr := &istioconfig.GRPCRoute{Meta: meta(validate.KindGRPCRoute, "demo", "g")}
		tr := &istioconfig.TLSRoute{Meta: meta(validate.KindTLSRoute, "ingress", "t")}
		if json.Unmarshal(gwSpec, &gw.Spec) != nil || json.Unmarshal(httpSpec, &hr.Spec) != nil ||
			json.Unmarshal(httpSpec, &gr.Spec) != nil || json.Unmarshal(tlsSpec, &tr.Spec) != nil {
			t.Skip()
		}
		snap := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{NamespaceLabels: map[string]map[string]string{"demo": {"a": "b"}}},
			[]istioconfig.Object{gw, hr, gr, tr})
		for _, g := range snap.GatewaysFor("ingress", model.NewLabels(map[string]string{istioconfig.GatewayNameLabel: "web"})) {
			if errs := validate.Gateway(g.Spec); len(errs) > 0 {
				t.Fatalf("translated Gateway invalid: %v\n%s", errs, gwSpec)
			}
			for _, vs := range snap.GatewayRoutes(g.Key) {
				if errs := validate.VirtualService(vs.Spec); len(errs) > 0 {
					t.Fatalf("translated VirtualService invalid: %v", errs)
				}
			}
		}
		for _, k := range []istioconfig.Key{hr.Key, gr.Key, tr.Key} {
			st, ok := snap.GatewayAPIStatus(k)
			if !ok {
				continue
			}
			if len(st.Parents) > len(hr.Spec.ParentRefs)+len(tr.Spec.ParentRefs) {
				t.Fatalf("%s: %d parents in status", k, len(st.Parents))
			}
		}
	})
}
