package xdsgen

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/model"
)

// vsCase is one VirtualService (and optionally DestinationRule) for echo
// (ports 8080 gRPC, 9090 HTTP), with the fields of the notes each proxy
// kind must report.
type vsCase struct {
	name       string
	vs, dr     string // specs as JSON; dr may be empty
	grpcNotes  []string
	envoyNotes []string
}

var vsCases = []vsCase{
	{name: "match_uri", vs: `{"hosts":["echo"],"http":[
		{"name":"exact","match":[{"uri":{"exact":"/echo.Echo/Hello"}}],"route":[{"destination":{"host":"echo","subset":"v2"}}]},
		{"name":"prefix","match":[{"uri":{"prefix":"/echo.Echo/"},"ignoreUriCase":true},{"name":"re","uri":{"regex":"/grpc\\.health\\..*"}}],"route":[{"destination":{"host":"echo","subset":"v1"}}]},
		{"route":[{"destination":{"host":"echo"}}]}]}`},
	{name: "match_headers", vs: `{"hosts":["echo"],"http":[
		{"name":"canary","match":[{"headers":{"x-canary":{"exact":"1"},"x-user":{"prefix":"test-"},"x-trace":{"regex":"[0-9a-f]+"},"x-debug":{}}}],"route":[{"destination":{"host":"echo","subset":"v2"}}]},
		{"name":"absent","match":[{"withoutHeaders":{"x-stable":{}}}],"route":[{"destination":{"host":"echo","subset":"v1"}}]},
		{"name":"notvalue","match":[{"withoutHeaders":{"x-env":{"exact":"prod"}}}],"route":[{"destination":{"host":"echo","subset":"v1"}}]},
		{"route":[{"destination":{"host":"echo"}}]}]}`,
		grpcNotes: []string{"spec.http[2].match[0].withoutHeaders[x-env]"}},
	{name: "match_pseudo", vs: `{"hosts":["echo"],"http":[
		{"name":"post","match":[{"method":{"exact":"POST"},"uri":{"prefix":"/echo."}}],"route":[{"destination":{"host":"echo","subset":"v1"}}]},
		{"name":"get","match":[{"method":{"regex":"GET|HEAD"}}],"route":[{"destination":{"host":"echo","subset":"v2"}}]},
		{"name":"authority","match":[{"authority":{"prefix":"echo."}},{"scheme":{"exact":"https"}}],"route":[{"destination":{"host":"echo","subset":"v2"}}]}]}`,
		grpcNotes: []string{"spec.http[2].match[0].authority", "spec.http[2].match[1].scheme"}},
	{name: "match_port", vs: `{"hosts":["echo"],"http":[
		{"name":"http-only","match":[{"port":9090,"uri":{"prefix":"/admin"}}],"route":[{"destination":{"host":"echo","subset":"v2"}}]},
		{"name":"grpc-only","match":[{"port":8080}],"route":[{"destination":{"host":"echo","subset":"v1"}}]}]}`},
	{name: "match_source", vs: `{"hosts":["echo"],"http":[
		{"name":"labels","match":[{"sourceLabels":{"app":"client"}}],"route":[{"destination":{"host":"echo","subset":"v2"}}]},
		{"name":"ns","match":[{"sourceNamespace":"tests"},{"gateways":["ingress/gw"]},{"gateways":["mesh"],"sourceLabels":{"ignored":"x"},"uri":{"prefix":"/m"}}],"route":[{"destination":{"host":"echo","subset":"v2"}}]},
		{"route":[{"destination":{"host":"echo"}}]}]}`,
		grpcNotes: []string{"spec.http[0].match[0].sourceLabels", "spec.http[1].match[0].sourceNamespace"}},
	{name: "match_query", vs: `{"hosts":["echo"],"http":[
		{"name":"q","match":[{"queryParams":{"debug":{"exact":"1"},"v":{}}}],"route":[{"destination":{"host":"echo","subset":"v2"}}]},
		{"route":[{"destination":{"host":"echo"}}]}]}`,
		grpcNotes: []string{"spec.http[0].match[0].queryParams"}},
	{name: "weights", vs: `{"hosts":["echo"],"http":[{"route":[
		{"destination":{"host":"echo","subset":"v1"},"weight":90},
		{"destination":{"host":"echo","subset":"v2"},"weight":10},
		{"destination":{"host":"echo","subset":"v3"},"weight":0}]}]}`},
	{name: "destination_other_host", vs: `{"hosts":["echo"],"http":[{"route":[
		{"destination":{"host":"backend.other","port":{"number":7000}}}]}]}`},
	{name: "timeout", vs: `{"hosts":["echo"],"http":[
		{"match":[{"uri":{"prefix":"/slow"}}],"timeout":"1.5s","route":[{"destination":{"host":"echo"}}]},
		{"route":[{"destination":{"host":"echo"}}]}]}`},
	{name: "retries", vs: `{"hosts":["echo"],"http":[
		{"match":[{"uri":{"prefix":"/a"}}],"retries":{"attempts":3,"perTryTimeout":"200ms","retryOn":"5xx,unavailable,503,cancelled,bogus","backoff":"10ms","retryRemoteLocalities":true},"route":[{"destination":{"host":"echo"}}]},
		{"match":[{"uri":{"prefix":"/b"}}],"retries":{"attempts":2,"retryOn":"connect-failure,5xx"},"route":[{"destination":{"host":"echo"}}]},
		{"match":[{"uri":{"prefix":"/c"}}],"retries":{"attempts":0},"route":[{"destination":{"host":"echo"}}]},
		{"retries":{"attempts":4},"route":[{"destination":{"host":"echo"}}]}]}`,
		grpcNotes: []string{
			"spec.http[0].retries.retryOn", "spec.http[0].retries.retryOn", "spec.http[0].retries.retryOn",
			"spec.http[0].retries.perTryTimeout", "spec.http[1].retries.retryOn", "spec.http[1].retries.retryOn", "spec.http[1].retries",
		},
		envoyNotes: []string{"spec.http[0].retries.retryOn"}},
	{name: "fault", vs: `{"hosts":["echo"],"http":[
		{"match":[{"headers":{"x-fault":{"exact":"abort"}}}],"fault":{"abort":{"grpcStatus":"UNAVAILABLE","percentage":{"value":100}}},"route":[{"destination":{"host":"echo"}}]},
		{"match":[{"headers":{"x-fault":{"exact":"http"}}}],"fault":{"abort":{"httpStatus":503}},"route":[{"destination":{"host":"echo"}}]},
		{"match":[{"headers":{"x-fault":{"exact":"bad"}}}],"fault":{"abort":{"grpcStatus":"NOPE","percentage":{"value":1}}},"route":[{"destination":{"host":"echo"}}]},
		{"fault":{"delay":{"fixedDelay":"2s","percentage":{"value":12.5}}},"timeout":"1s","route":[{"destination":{"host":"echo"}}]}]}`,
		grpcNotes:  []string{"spec.http[2].fault.abort.grpcStatus"},
		envoyNotes: []string{"spec.http[2].fault.abort.grpcStatus"}},
	{name: "headers", vs: `{"hosts":["echo"],"http":[{
		"headers":{"request":{"set":{"x-a":"1","host":"echo.internal",":path":"/x"},"add":{"x-b":"2"},"remove":["x-c",":method"]},"response":{"set":{"x-d":"4"},"remove":["server"]}},
		"route":[{"destination":{"host":"echo","subset":"v1"},"weight":50,"headers":{"request":{"set":{"x-v":"1"}}}},
		         {"destination":{"host":"echo","subset":"v2"},"weight":50,"headers":{"request":{"set":{"x-v":"2","host":"v2.echo"}}}}]}]}`,
		grpcNotes:  []string{"spec.http[0].route[0].headers", "spec.http[0].route[1].headers", "spec.http[0].headers"},
		envoyNotes: []string{"spec.http[0].headers.request.set[:path]", "spec.http[0].headers.request.remove[1]"}},
	{name: "rewrite_redirect", vs: `{"hosts":["echo"],"http":[
		{"name":"moved","match":[{"uri":{"prefix":"/old"}}],"redirect":{"uri":"/new","authority":"new.example.com","redirectCode":308,"port":443,"scheme":"https"}},
		{"name":"teapot","match":[{"uri":{"prefix":"/tea"}}],"directResponse":{"status":418,"body":{"string":"short and stout"}}},
		{"name":"v2","match":[{"uri":{"prefix":"/v2/"}}],"rewrite":{"uri":"/"},"route":[{"destination":{"host":"echo"}}]},
		{"name":"auth","rewrite":{"authority":"echo.internal"},"route":[{"destination":{"host":"echo"}}]}]}`,
		grpcNotes: []string{"spec.http[0].redirect", "spec.http[1].directResponse", "spec.http[2].rewrite.uri", "spec.http[3].rewrite.authority"}},
	{name: "mirror_cors", vs: `{"hosts":["echo"],"http":[{
		"mirror":{"host":"echo","subset":"shadow"},"mirrorPercentage":{"value":5},
		"mirrors":[{"destination":{"host":"audit.ops","port":{"number":80}}}],
		"corsPolicy":{"allowOrigins":[{"exact":"https://a.example"},{"regex":"https://.*\\.b\\.example"}],"allowMethods":["GET","POST"],"allowHeaders":["x-a"],"maxAge":"24h","allowCredentials":true},
		"route":[{"destination":{"host":"echo"}}]}]}`,
		grpcNotes: []string{"spec.http[0].mirror", "spec.http[0].corsPolicy"}},
	{name: "delegate", vs: `{"hosts":["echo"],"http":[
		{"match":[{"uri":{"prefix":"/d"}}],"delegate":{"name":"child"}},
		{"route":[{"destination":{"host":"echo"}}]}]}`,
		grpcNotes:  []string{"spec.http[0].delegate"},
		envoyNotes: []string{"spec.http[0].delegate"}},
	{name: "hash", vs: `{"hosts":["echo"],"http":[{"route":[{"destination":{"host":"echo","subset":"v1"}}]}]}`,
		dr: `{"host":"echo","trafficPolicy":{"loadBalancer":{"consistentHash":{"httpHeaderName":"x-user"}}},"subsets":[
			{"name":"v1","labels":{"version":"v1"},"trafficPolicy":{"loadBalancer":{"consistentHash":{"httpCookie":{"name":"session","ttl":"60s"}}}}}]}`,
		grpcNotes: []string{"spec.http[0].route[0]"}},
	{name: "catch_all", vs: `{"hosts":["echo"],"http":[
		{"match":[{"uri":{"prefix":"/"}}],"route":[{"destination":{"host":"echo","subset":"v1"}}]},
		{"match":[{"uri":{"prefix":"/never"}}],"route":[{"destination":{"host":"echo","subset":"v2"}}]}]}`},
	{name: "no_rule_for_port", vs: `{"hosts":["echo"],"http":[
		{"match":[{"port":9090}],"route":[{"destination":{"host":"echo","subset":"v2"}}]}]}`,
		dr: `{"host":"echo","trafficPolicy":{"loadBalancer":{"consistentHash":{"httpHeaderName":"x-user"}}}}`},
}

// decodeSpec decodes and validates a spec of kind, failing t unless valid.
func decodeSpec(t testing.TB, kind, spec string) proto.Message {
	t.Helper()
	msg, errs := validate.DecodeSpec(kind, []byte(spec))
	if len(errs) == 0 {
		errs = validate.Spec(msg)
	}
	if len(errs) != 0 {
		t.Fatalf("invalid %s: %v", kind, errs)
	}
	return msg
}

// configOf is the snapshot holding tc's objects, in namespace demo.
func configOf(t testing.TB, tc vsCase) *istioconfig.Snapshot {
	t.Helper()
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	objs := []istioconfig.Object{&istioconfig.VirtualService{
		Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: validate.KindVirtualService, Namespace: "demo", Name: "echo"}, Generation: 1, Created: created},
		Spec: decodeSpec(t, validate.KindVirtualService, tc.vs).(*networking.VirtualService),
	}}
	if tc.dr != "" {
		objs = append(objs, &istioconfig.DestinationRule{
			Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: validate.KindDestinationRule, Namespace: "demo", Name: "echo"}, Generation: 1, Created: created},
			Spec: decodeSpec(t, validate.KindDestinationRule, tc.dr).(*networking.DestinationRule),
		})
	}
	return istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, objs)
}

func noteFields(ns []RouteNote) []string {
	out := make([]string, 0, len(ns))
	for _, n := range ns {
		out = append(out, n.Field)
	}
	return out
}

func noteLines(ns []RouteNote) string {
	var b strings.Builder
	for _, n := range ns {
		b.WriteString(n.String() + "\n")
	}
	return b.String()
}

// TestVirtualServiceRoutes checks the translation of each field for both
// proxy kinds against golden files, and the notes on what each leaves
// out.
func TestVirtualServiceRoutes(t *testing.T) {
	svc := echoService()
	for _, tc := range vsCases {
		t.Run(tc.name, func(t *testing.T) {
			config := configOf(t, tc)
			cfg := config.Host(svc.Hostname)
			grpcRoutes := Routes(svc, cfg, config.DomainSuffix())
			envoyRoutes := SidecarRoutes([]*model.MergedService{{Service: svc}}, config, Options{})
			grpcNotes := RouteNotes(ProxyGRPC, svc, cfg, config.DomainSuffix())
			envoyNotes := RouteNotes(ProxyEnvoy, svc, cfg, config.DomainSuffix())
			got := render(t, section{"grpc", asMessages(grpcRoutes)}, section{"envoy", asMessages(envoyRoutes)})
			got = fmt.Appendf(got, "\ngrpc notes:\n%s\nenvoy notes:\n%s", noteLines(grpcNotes), noteLines(envoyNotes))
			checkGolden(t, "vsroute_"+tc.name, got)

			// RouteNotes deduplicates across ports; the per-port notes must
			// name exactly the expected fields on the gRPC port (8080) and
			// the HTTP port (9090) alike.
			if got := dedup(noteFields(grpcNotes)); !slices.Equal(got, dedup(tc.grpcNotes)) {
				t.Errorf("gRPC notes on %v, want %v", got, dedup(tc.grpcNotes))
			}
			if got := dedup(noteFields(envoyNotes)); !slices.Equal(got, dedup(tc.envoyNotes)) {
				t.Errorf("Envoy notes on %v, want %v", got, dedup(tc.envoyNotes))
			}
			for _, rc := range append(grpcRoutes, envoyRoutes...) {
				checkValid(t, "route "+rc.GetName(), rc)
			}
		})
	}
}

func dedup(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return slices.Compact(out)
}

// TestVirtualServiceRoutesBehaviour asserts the properties the issue's
// scenarios depend on, independent of the golden files.
func TestVirtualServiceRoutesBehaviour(t *testing.T) {
	svc := echoService()
	byName := map[string]vsCase{}
	for _, tc := range vsCases {
		byName[tc.name] = tc
	}
	routesOf := func(t *testing.T, name string, kind ProxyKind, port uint32) []*routev3.Route {
		t.Helper()
		config := configOf(t, byName[name])
		if kind == ProxyGRPC {
			for _, rc := range Routes(svc, config.Host(svc.Hostname), "") {
				if rc.GetName() == RouteName(svc.Hostname, port) {
					return rc.GetVirtualHosts()[0].GetRoutes()
				}
			}
		}
		for _, rc := range SidecarRoutes([]*model.MergedService{{Service: svc}}, config, Options{}) {
			if rc.GetName() == SidecarRouteName(port) {
				return rc.GetVirtualHosts()[0].GetRoutes()
			}
		}
		t.Fatalf("no route config for port %d", port)
		return nil
	}

	t.Run("weights split 90/10 between subset clusters", func(t *testing.T) {
		for _, kind := range []ProxyKind{ProxyGRPC, ProxyEnvoy} {
			wc := routesOf(t, "weights", kind, 8080)[0].GetRoute().GetWeightedClusters().GetClusters()
			got := map[string]uint32{}
			for _, c := range wc {
				got[c.GetName()] = c.GetWeight().GetValue()
			}
			want := map[string]uint32{"outbound|8080|v1|" + string(echoHost): 90, "outbound|8080|v2|" + string(echoHost): 10}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: weighted clusters %v, want %v", kind, got, want)
			}
		}
	})
	t.Run("timeout is max_stream_duration", func(t *testing.T) {
		a := routesOf(t, "timeout", ProxyGRPC, 8080)[0].GetRoute()
		if a.GetTimeout() != nil || a.GetMaxStreamDuration().GetGrpcTimeoutHeaderMax() != nil ||
			a.GetMaxStreamDuration().GetMaxStreamDuration().AsDuration() != 1500*time.Millisecond {
			t.Errorf("gRPC timeout action %v", a)
		}
		// Envoy ignores route.timeout next to max_stream_duration: the
		// timeout is the stream duration, and it caps grpc-timeout.
		e := routesOf(t, "timeout", ProxyEnvoy, 8080)[0].GetRoute()
		if e.GetTimeout() != nil || e.GetMaxStreamDuration().GetMaxStreamDuration().AsDuration() != 1500*time.Millisecond ||
			e.GetMaxStreamDuration().GetGrpcTimeoutHeaderMax().AsDuration() != 1500*time.Millisecond {
			t.Errorf("Envoy timeout action %v", e)
		}
	})
	t.Run("attempts 0 disables retries", func(t *testing.T) {
		for _, kind := range []ProxyKind{ProxyGRPC, ProxyEnvoy} {
			if rp := routesOf(t, "retries", kind, 8080)[2].GetRoute().GetRetryPolicy(); rp != nil {
				t.Errorf("%s: retry policy %v", kind, rp)
			}
		}
	})
	t.Run("gRPC retries only on gRPC codes", func(t *testing.T) {
		rs := routesOf(t, "retries", ProxyGRPC, 8080)
		if got := rs[0].GetRoute().GetRetryPolicy().GetRetryOn(); got != "unavailable,cancelled" {
			t.Errorf("retry_on %q", got)
		}
		if rp := rs[1].GetRoute().GetRetryPolicy(); rp != nil {
			t.Errorf("HTTP-only conditions kept a policy: %v", rp)
		}
		if got := rs[3].GetRoute().GetRetryPolicy().GetRetryOn(); got != "unavailable,cancelled" {
			t.Errorf("Istio's default conditions for gRPC: %q", got)
		}
	})
	t.Run("fault abort maps the gRPC status name", func(t *testing.T) {
		for _, kind := range []ProxyKind{ProxyGRPC, ProxyEnvoy} {
			r := routesOf(t, "fault", kind, 8080)[0]
			f := r.GetTypedPerFilterConfig()[faultFilterName]
			if f == nil || !strings.Contains(f.String(), "grpc_status:14") && !strings.Contains(fmt.Sprint(unpackAny(t, f)), "grpc_status:14") {
				t.Errorf("%s: fault override %v", kind, f)
			}
		}
	})
	t.Run("a match for another port falls back to the default route", func(t *testing.T) {
		for _, kind := range []ProxyKind{ProxyGRPC, ProxyEnvoy} {
			rs := routesOf(t, "no_rule_for_port", kind, 8080)
			if len(rs) != 1 || rs[0].GetName() != "default" || rs[0].GetRoute().GetCluster() != ClusterName(echoHost, 8080) {
				t.Fatalf("%s: routes %v", kind, rs)
			}
			if hp := rs[0].GetRoute().GetHashPolicy(); len(hp) != 1 || hp[0].GetHeader().GetHeaderName() != "x-user" {
				t.Errorf("%s: default route does not hash by the DestinationRule: %v", kind, hp)
			}
		}
	})
	t.Run("a left-out match never becomes a catch-all", func(t *testing.T) {
		rs := routesOf(t, "match_source", ProxyGRPC, 8080)
		// Rule 1's only applicable match is the mesh one (/m); rule 0 and
		// the sourceNamespace match are left out.
		if len(rs) != 2 || rs[0].GetMatch().GetPrefix() != "/m" || !isCatchAll(rs[1].GetMatch()) {
			t.Errorf("routes %v", rs)
		}
	})
}

// TestSidecarClassRoutes: an Envoy sidecar's routes hold exactly the
// matches on clients that its class satisfies, under a name of the class,
// while the default class's hold none of them.
func TestSidecarClassRoutes(t *testing.T) {
	var tc vsCase
	for _, c := range vsCases {
		if c.name == "match_source" {
			tc = c
		}
	}
	config := configOf(t, tc)
	services := []*model.MergedService{{Service: echoService()}}
	// The names of the routes of the echo virtual host on port 9090.
	routeNames := func(class istioconfig.RouteClass) (rc string, names []string) {
		for _, r := range SidecarSetRoutes(services, config, RouteSet{Class: class}, Options{}) {
			if !strings.HasPrefix(r.GetName(), "9090") {
				continue
			}
			checkValid(t, "route "+r.GetName(), r)
			for _, route := range r.GetVirtualHosts()[0].GetRoutes() {
				names = append(names, route.GetName()+" "+route.GetMatch().GetPrefix())
			}
			return r.GetName(), names
		}
		t.Fatal("no routes of port 9090")
		return "", nil
	}
	for _, c := range []struct {
		name      string
		ns        string
		labels    map[string]string
		wantName  bool // a class name after "9090~"
		wantRoute []string
	}{
		// A match that the class satisfies and that has no other condition
		// is a catch-all: the rules after it are left out.
		{"default", "demo", map[string]string{"app": "other"}, false, []string{"ns /m", " /"}},
		{"labels", "demo", map[string]string{"app": "client", "version": "v1"}, true, []string{"labels /"}},
		{"namespace", "tests", nil, true, []string{"ns /"}},
		{"both", "tests", map[string]string{"app": "client"}, true, []string{"labels /"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			class := config.RouteClass(c.ns, model.NewLabels(c.labels))
			name, got := routeNames(class)
			if wantName := SidecarRouteSetName(9090, RouteSet{Class: class}); name != wantName || strings.Contains(name, "~") != c.wantName {
				t.Errorf("route configuration %q (class %v), want %q", name, class, wantName)
			}
			if !slices.Equal(got, c.wantRoute) {
				t.Errorf("routes %q, want %q", got, c.wantRoute)
			}
		})
	}
	t.Run("listeners name their class's routes", func(t *testing.T) {
		class := config.RouteClass("tests", model.NewLabels(nil))
		ls := SidecarListeners(services, Sidecar{IP: netip.MustParseAddr("10.0.0.9"), Routes: class}, Options{})
		found := false
		for _, l := range ls {
			if l.GetName() != "0.0.0.0_9090" {
				continue
			}
			found = true
			hcm := &hcmv3.HttpConnectionManager{}
			if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
				t.Fatal(err)
			}
			if got, want := hcm.GetRds().GetRouteConfigName(), SidecarRouteSetName(9090, RouteSet{Class: class}); got != want {
				t.Errorf("listener takes routes %q, want %q", got, want)
			}
		}
		if !found {
			t.Error("no listener 0.0.0.0_9090")
		}
	})
}

func unpackAny(t *testing.T, a *anypb.Any) proto.Message {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestNoVirtualServiceUnchanged: without Istio config the routes are the
// ones generated before VirtualServices existed.
func TestNoVirtualServiceUnchanged(t *testing.T) {
	svc := echoService()
	for _, rc := range Routes(svc, istioconfig.HostConfig{}, "") {
		rs := rc.GetVirtualHosts()[0].GetRoutes()
		if len(rs) != 1 || rs[0].GetName() != "default" || len(rs[0].GetRoute().GetHashPolicy()) != 0 {
			t.Errorf("%s: %v", rc.GetName(), rs)
		}
	}
	services := sidecarServices()
	if a, b := SidecarRoutes(services, nil, Options{}), SidecarRoutes(services, istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, nil), Options{}); len(a) == 0 || len(a) != len(b) {
		t.Fatalf("routes %d and %d", len(a), len(b))
	} else {
		for i := range a {
			if !proto.Equal(a[i], b[i]) {
				t.Errorf("nil and empty config differ on %s", a[i].GetName())
			}
		}
	}
}

// checkValid fails t with every validation error of m and of the
// messages packed in its Anys (sidecar_test.go's validateDeep).
func checkValid(t testing.TB, what string, m proto.Message) {
	t.Helper()
	if _, errs := validateDeep(m); len(errs) > 0 {
		t.Errorf("%s: %v", what, errs)
	}
}

// TestListenersCarryRouteFilters: every HCM that VirtualService routes
// may use has the fault filter (and, on Envoy, the CORS filter) before
// the router, so a route override always finds its filter.
func TestListenersCarryRouteFilters(t *testing.T) {
	names := func(fs []string) string { return strings.Join(fs, ",") }
	for _, l := range Listeners(echoService()) {
		checkValid(t, l.GetName(), l)
		hcm := unpackHCM(t, l.GetApiListener().GetApiListener())
		if got := names(filterNames(hcm)); got != faultFilterName+","+routerFilterName {
			t.Errorf("%s: filters %s", l.GetName(), got)
		}
	}
	for _, l := range SidecarListeners(sidecarServices(), sidecarOf(InterceptRedirect), Options{}) {
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() != filterHCM || l.GetTrafficDirection().String() != "OUTBOUND" {
					continue
				}
				if got := names(filterNames(unpackHCM(t, f.GetTypedConfig()))); got != faultFilterName+","+corsFilterName+","+routerFilterName {
					t.Errorf("%s: filters %s", l.GetName(), got)
				}
			}
		}
	}
}

// FuzzVirtualServiceRoutes feeds arbitrary VirtualService specs that pass
// validation through both translations: the routes must never panic and
// always pass the protos' validation rules.
func FuzzVirtualServiceRoutes(f *testing.F) {
	for _, tc := range vsCases {
		f.Add([]byte(tc.vs))
	}
	svc := echoService()
	f.Fuzz(func(t *testing.T, spec []byte) {
		msg, errs := validate.DecodeSpec(validate.KindVirtualService, spec)
		if len(errs) != 0 || len(validate.Spec(msg)) != 0 {
			t.Skip()
		}
		vs := msg.(*networking.VirtualService)
		vs.Hosts = []string{"echo"} // bind it to the fixture's host
		vs.Gateways = nil
		if len(validate.Spec(vs)) != 0 {
			t.Skip()
		}
		config := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{&istioconfig.VirtualService{
			Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: validate.KindVirtualService, Namespace: "demo", Name: "fuzz"}},
			Spec: vs,
		}})
		cfg := config.Host(svc.Hostname)
		rcs := Routes(svc, cfg, "")
		rcs = append(rcs, SidecarRoutes([]*model.MergedService{{Service: svc}}, config, Options{})...)
		for _, rc := range rcs {
			if _, errs := validateDeep(rc); len(errs) > 0 {
				t.Fatalf("route %s: %v\nspec: %s", rc.GetName(), errs, spec)
			}
		}
		_ = RouteNotes(ProxyGRPC, svc, cfg, "")
	})
}

func unpackHCM(t *testing.T, a *anypb.Any) *hcmv3.HttpConnectionManager {
	t.Helper()
	hcm := &hcmv3.HttpConnectionManager{}
	if err := a.UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	return hcm
}

func filterNames(hcm *hcmv3.HttpConnectionManager) []string {
	var out []string
	for _, f := range hcm.GetHttpFilters() {
		out = append(out, f.GetName())
	}
	return out
}

// FuzzVirtualServiceStrings puts arbitrary strings into every string field
// of a VirtualService that uses all translated features, so that the
// fuzzer reaches values (control characters, odd header names, big
// regexes) that byte-level mutations of JSON rarely keep valid; the specs
// validation accepts must translate to valid routes for both kinds.
func FuzzVirtualServiceStrings(f *testing.F) {
	f.Add("/a", "x-h", "v", "echo.example", "https", "GET", "/r", "1.5s", "5xx,unavailable,503", "UNAVAILABLE", 90.0)
	f.Add("(a|b)*", ":authority", "\x00", "a\nb", "", "[", "", "0.001", "bogus,,", "nope", 0.0)
	svc := echoService()
	f.Fuzz(func(t *testing.T, uri, header, value, authority, scheme, method, rewrite, timeout, retryOn, grpcStatus string, pct float64) {
		q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
		spec := fmt.Sprintf(`{"hosts":["echo"],"http":[
			{"match":[{"uri":{"regex":%[1]s},"headers":{%[2]s:{"prefix":%[3]s}},"withoutHeaders":{%[2]s:{"regex":%[3]s}},"queryParams":{%[2]s:{"exact":%[3]s}},"method":{"exact":%[6]s},"authority":{"prefix":%[4]s},"scheme":{"exact":%[5]s}}],
			 "headers":{"request":{"set":{%[2]s:%[3]s},"remove":[%[2]s]},"response":{"add":{%[3]s:%[2]s}}},
			 "rewrite":{"uri":%[7]s,"authority":%[4]s},"timeout":%[8]s,"retries":{"attempts":2,"retryOn":%[9]s},
			 "fault":{"abort":{"grpcStatus":%[10]s,"percentage":{"value":%[11]v}},"delay":{"fixedDelay":%[8]s,"percentage":{"value":%[11]v}}},
			 "corsPolicy":{"allowOrigins":[{"exact":%[3]s},{"prefix":%[3]s},{"regex":%[1]s}],"allowMethods":[%[6]s],"allowHeaders":[%[2]s]},
			 "mirror":{"host":"echo","subset":"m"},"mirrorPercentage":{"value":%[11]v},
			 "route":[{"destination":{"host":"echo","subset":"v1"},"weight":50,"headers":{"request":{"set":{%[2]s:%[4]s}}}},{"destination":{"host":"echo"},"weight":50}]},
			{"match":[{"uri":{"prefix":%[1]s}}],"redirect":{"uri":%[7]s,"authority":%[4]s,"scheme":%[5]s}},
			{"match":[{"uri":{"exact":%[1]s}}],"directResponse":{"status":200,"body":{"string":%[3]s}}},
			{"rewrite":{"uriRegexRewrite":{"match":%[1]s,"rewrite":%[7]s}},"route":[{"destination":{"host":"echo"}}]}]}`,
			q(uri), q(header), q(value), q(authority), q(scheme), q(method), q(rewrite), q(timeout), q(retryOn), q(grpcStatus), pct)
		msg, errs := validate.DecodeSpec(validate.KindVirtualService, []byte(spec))
		if len(errs) != 0 || len(validate.Spec(msg)) != 0 {
			t.Skip()
		}
		config := istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{&istioconfig.VirtualService{
			Meta: istioconfig.Meta{Key: istioconfig.Key{Kind: validate.KindVirtualService, Namespace: "demo", Name: "fuzz"}},
			Spec: msg.(*networking.VirtualService),
		}})
		rcs := append(Routes(svc, config.Host(svc.Hostname), ""), SidecarRoutes([]*model.MergedService{{Service: svc}}, config, Options{})...)
		for _, rc := range rcs {
			if _, errs := validateDeep(rc); len(errs) > 0 {
				t.Fatalf("route %s: %v\nspec: %s", rc.GetName(), errs, spec)
			}
		}
	})
}
