package xdsgen

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	networking "istio.io/api/networking/v1alpha3"
	security "istio.io/api/security/v1beta1"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
)

// capabilityObjects are Istio objects that use every part of the
// configuration some kind lacks; each VirtualService rule has a match of
// its own, so that no rule a kind can take hides the later ones.
func capabilityObjects(t *testing.T) []istioconfig.Object {
	t.Helper()
	decode := func(kind, spec string) any {
		msg, errs := validate.DecodeSpec(kind, []byte(spec))
		if len(errs) > 0 {
			t.Fatalf("%s: %v", kind, errs)
		}
		return msg
	}
	meta := func(kind, name string) istioconfig.Meta {
		return istioconfig.Meta{Key: istioconfig.Key{Kind: kind, Namespace: "demo", Name: name}}
	}
	vs := &istioconfig.VirtualService{Meta: meta(validate.KindVirtualService, "all"), Spec: decode(validate.KindVirtualService, `{"hosts":["echo"],"http":[
		{"match":[{"uri":{"prefix":"/r0"}}],"redirect":{"uri":"/elsewhere"}},
		{"match":[{"uri":{"prefix":"/r1"}}],"directResponse":{"status":503}},
		{"match":[{"uri":{"prefix":"/r2"}}],"rewrite":{"uri":"/other"},"route":[{"destination":{"host":"echo"}}]},
		{"match":[{"uri":{"prefix":"/r3"},"sourceLabels":{"app":"client"}}],"route":[{"destination":{"host":"echo"}}]},
		{"match":[{"uri":{"prefix":"/r4"},"headers":{":path":{"exact":"/x"}}}],"route":[{"destination":{"host":"echo"}}]},
		{"match":[{"uri":{"prefix":"/r5"},"authority":{"exact":"a"}},{"uri":{"prefix":"/r5"},"scheme":{"exact":"https"}}],"route":[{"destination":{"host":"echo"}}]},
		{"match":[{"uri":{"prefix":"/r6"},"withoutHeaders":{"x-env":{"exact":"prod"}}}],"route":[{"destination":{"host":"echo"}}]},
		{"match":[{"uri":{"prefix":"/r7"},"queryParams":{"q":{"exact":"1"}}}],"route":[{"destination":{"host":"echo"}}]},
		{"match":[{"uri":{"prefix":"/r8"}}],"rewrite":{"authority":"b"},"headers":{"request":{"set":{"x-a":"1"}}},
		 "mirror":{"host":"shadow"},"corsPolicy":{"allowOrigins":[{"exact":"https://a"}]},
		 "retries":{"attempts":2,"retryOn":"5xx,unavailable","perTryTimeout":"1s"},"route":[{"destination":{"host":"echo"}}]}]}`).(*networking.VirtualService)}
	dr := &istioconfig.DestinationRule{Meta: meta(validate.KindDestinationRule, "all"), Spec: decode(validate.KindDestinationRule, `{"host":"echo",
		"trafficPolicy":{"loadBalancer":{"simple":"RANDOM"},"portLevelSettings":[
			{"port":{"number":8080},"loadBalancer":{"consistentHash":{"httpCookie":{"name":"c","ttl":"1s"}}}},
			{"port":{"number":9090},"loadBalancer":{"consistentHash":{"httpHeaderName":"x-h","maglev":{"tableSize":65537}}}},
			{"port":{"number":9091},"loadBalancer":{"simple":"LEAST_REQUEST","localityLbSetting":{"distribute":[{"from":"a/*","to":{"a/*":100}}]}}}]},
		"subsets":[
			{"name":"simple","labels":{"v":"1"},"trafficPolicy":{"tls":{"mode":"SIMPLE"}}},
			{"name":"sni","labels":{"v":"2"},"trafficPolicy":{"tls":{"mode":"ISTIO_MUTUAL","sni":"echo.example"}}}]}`).(*networking.DestinationRule)}
	audit := &istioconfig.AuthorizationPolicy{Meta: meta(validate.KindAuthorizationPolicy, "audit"),
		Spec: decode(validate.KindAuthorizationPolicy, `{"action":"AUDIT","rules":[{}]}`).(*security.AuthorizationPolicy)}
	allow := &istioconfig.AuthorizationPolicy{Meta: meta(validate.KindAuthorizationPolicy, "allow"),
		Spec: decode(validate.KindAuthorizationPolicy, `{"rules":[{"from":[{"source":{"remoteIpBlocks":["10.0.0.0/8"]}}],
			"when":[{"key":"connection.sni","values":["a"]},{"key":"request.headers[grpc-x]","values":["b"]}]}]}`).(*security.AuthorizationPolicy)}
	return []istioconfig.Object{vs, dr, audit, allow}
}

// notesOf returns every note the generators give kind on objs and on a
// DNS-resolved service, as "field: reason".
func notesOf(objs []istioconfig.Object, kind ProxyKind) []string {
	var out []string
	for _, o := range objs {
		for _, n := range ConfigNotes(o, "") {
			if n.Kind == kind {
				out = append(out, n.Field+": "+n.Reason)
			}
		}
	}
	for _, n := range ServiceNotes(dnsMerged(model.ResolutionDNS), nil) {
		if strings.HasSuffix(n, "("+kind.String()+")") {
			out = append(out, n)
		}
	}
	return out
}

// methodRouted reports whether kind gets a route for a GET-only match.
func methodRouted(kind ProxyKind) bool {
	vs := &istioconfig.VirtualService{Spec: &networking.VirtualService{Hosts: []string{"echo"}, Http: []*networking.HTTPRoute{{
		Match: []*networking.HTTPMatchRequest{{Method: &networking.StringMatch{MatchType: &networking.StringMatch_Exact{Exact: "GET"}}}},
		Route: []*networking.HTTPRouteDestination{{Destination: &networking.Destination{Host: "echo"}}},
	}}}}
	routes, _ := virtualServiceRoutes(kind, "echo.demo.svc.cluster.local", 9090, istioconfig.HostConfig{VirtualService: vs}, istioconfig.RouteClass{}, "", nil)
	return len(routes) > 0
}

// TestTranslatorsReadTheCapabilityTable: every Lack of proxyless gRPC's
// table shows in its notes; and the same Lack given to Envoy's table alone
// makes Envoy's notes say it, and nothing else of Envoy's changes: the
// translators ask the table, not the kind, so a new kind is served by
// declaring what it lacks.
func TestTranslatorsReadTheCapabilityTable(t *testing.T) {
	objs := capabilityObjects(t)
	grpcNotes := strings.Join(notesOf(objs, ProxyGRPC), "\n")
	envoyBase := notesOf(objs, ProxyEnvoy)
	if !methodRouted(ProxyEnvoy) || methodRouted(ProxyGRPC) {
		t.Fatalf("a GET match is routed for Envoy (%v) and not for gRPC (%v): want true, false", methodRouted(ProxyEnvoy), methodRouted(ProxyGRPC))
	}
	lacks := 0
	caps := reflect.ValueOf(proxylessGRPC)
	for i := range caps.NumField() {
		f := caps.Type().Field(i)
		lack, ok := caps.Field(i).Interface().(Lack)
		if !ok || lack.Can() {
			continue
		}
		lacks++
		t.Run(f.Name, func(t *testing.T) {
			if f.Name == "MethodMatch" {
				// Decided when generating: no note, no route.
				saved := envoySidecar
				defer func() { envoySidecar = saved }()
				reflect.ValueOf(&envoySidecar).Elem().Field(i).Set(reflect.ValueOf(lack))
				if methodRouted(ProxyEnvoy) {
					t.Errorf("Envoy lacking %s still gets a route for a GET match", f.Name)
				}
				return
			}
			if !strings.Contains(grpcNotes, string(lack)) {
				t.Errorf("no gRPC note says %q; notes:\n%s", lack, grpcNotes)
			}
			marker := Lack("marker: Envoy lacks " + f.Name)
			saved := envoySidecar
			defer func() { envoySidecar = saved }()
			reflect.ValueOf(&envoySidecar).Elem().Field(i).Set(reflect.ValueOf(marker))
			var extra []string
			for _, n := range notesOf(objs, ProxyEnvoy) {
				if !slices.Contains(envoyBase, n) {
					extra = append(extra, n)
				}
			}
			// A Lack may have consequences noted too (retries with no
			// condition left, say); one note must give it as the reason.
			if !strings.Contains(strings.Join(extra, "\n"), string(marker)) {
				t.Errorf("Envoy lacking %s: no new note says why; new notes %q", f.Name, extra)
			}
		})
	}
	if lacks < 20 {
		t.Errorf("the gRPC table declares %d lacks; the walk over its fields found too few", lacks)
	}
}
