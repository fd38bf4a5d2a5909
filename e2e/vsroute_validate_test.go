//go:build linux

package e2e

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1alpha3"

	"github.com/meshfed/meshfed/e2e/framework"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
	"github.com/meshfed/meshfed/pkg/xdsgen"
)

// vsValidateSpec uses every VirtualService field that SidecarRoutes
// translates for Envoy, one rule each.
const vsValidateSpec = `{"hosts":["echo"],"http":[
	{"name":"uri","match":[{"uri":{"exact":"/a"}},{"uri":{"prefix":"/B"},"ignoreUriCase":true},{"uri":{"regex":"/c/[0-9]+"}}],"route":[{"destination":{"host":"echo","subset":"v1"}}]},
	{"name":"headers","match":[{"headers":{"x-canary":{"exact":"1"},"x-p":{"prefix":"a"},"x-r":{"regex":"[a-z]+"},"x-present":{}},"withoutHeaders":{"x-no":{},"x-not":{"exact":"v"}}}],"route":[{"destination":{"host":"echo","subset":"v2"}}]},
	{"name":"pseudo","match":[{"method":{"exact":"GET"},"authority":{"prefix":"echo"},"scheme":{"exact":"http"},"queryParams":{"q":{"exact":"1"},"p":{}}}],"route":[{"destination":{"host":"echo","subset":"v2"}}]},
	{"name":"split","match":[{"uri":{"prefix":"/split"}}],"route":[
		{"destination":{"host":"echo","subset":"v1"},"weight":90,"headers":{"request":{"set":{"x-v":"1"}},"response":{"remove":["x-r"]}}},
		{"destination":{"host":"echo","subset":"v2"},"weight":10,"headers":{"request":{"set":{"host":"v2.echo"}}}}]},
	{"name":"policy","match":[{"uri":{"prefix":"/policy"}}],"timeout":"2s",
		"retries":{"attempts":3,"perTryTimeout":"500ms","retryOn":"5xx,gateway-error,unavailable,cancelled,503","backoff":"20ms","retryRemoteLocalities":true,"retryIgnorePreviousHosts":false},
		"fault":{"delay":{"fixedDelay":"1s","percentage":{"value":0.5}},"abort":{"grpcStatus":"UNAVAILABLE","percentage":{"value":10}}},
		"headers":{"request":{"set":{"x-a":"1"},"add":{"x-b":"2"},"remove":["x-c"]},"response":{"set":{"x-d":"4"},"add":{"x-e":"5"},"remove":["x-f"]}},
		"mirror":{"host":"echo","subset":"v2"},"mirrorPercentage":{"value":25},
		"corsPolicy":{"allowOrigins":[{"exact":"https://a.example"},{"prefix":"https://b."}],"allowMethods":["GET"],"allowHeaders":["x-a"],"exposeHeaders":["x-b"],"maxAge":"1h","allowCredentials":true},
		"route":[{"destination":{"host":"echo","subset":"v1"}}]},
	{"name":"abort-http","match":[{"uri":{"prefix":"/abort"}}],"fault":{"abort":{"httpStatus":503,"percentage":{"value":100}}},"route":[{"destination":{"host":"echo"}}]},
	{"name":"rewrite","match":[{"uri":{"prefix":"/old/"}}],"rewrite":{"uri":"/new/","authority":"echo.internal"},"route":[{"destination":{"host":"echo"}}]},
	{"name":"regex-rewrite","match":[{"uri":{"prefix":"/re/"}}],"rewrite":{"uriRegexRewrite":{"match":"^/re/(.*)$","rewrite":"/\\1"}},"route":[{"destination":{"host":"echo"}}]},
	{"name":"redirect","match":[{"uri":{"prefix":"/moved"}}],"redirect":{"uri":"/here","authority":"elsewhere.example","redirectCode":302,"port":8443,"scheme":"https"}},
	{"name":"derive","match":[{"uri":{"prefix":"/derive"}}],"redirect":{"prefixRewrite":"/d","derivePort":"FROM_REQUEST_PORT"}},
	{"name":"direct","match":[{"uri":{"prefix":"/tea"}}],"directResponse":{"status":418,"body":{"string":"teapot"}}},
	{"name":"no-retries","match":[{"uri":{"prefix":"/once"}}],"retries":{"attempts":0},"route":[{"destination":{"host":"echo"}}]},
	{"name":"rest","route":[{"destination":{"host":"echo","subset":"v1"}}]}]}`

const drValidateSpec = `{"host":"echo","trafficPolicy":{"loadBalancer":{"consistentHash":{"httpHeaderName":"x-user"}}},
	"subsets":[{"name":"v1","labels":{"version":"v1"}},{"name":"v2","labels":{"version":"v2"}}]}`

// TestEnvoyAcceptsVirtualServiceRoutes runs `envoy --mode validate` on the
// sidecar listeners and clusters generated with a VirtualService that uses
// every field SidecarRoutes translates, with the route configurations
// inlined into the listeners (RDS is not fetched in validate mode), so
// that Envoy checks each route, its fault and CORS overrides, and that
// the HCM has the filters they name.
func TestEnvoyAcceptsVirtualServiceRoutes(t *testing.T) {
	bin := framework.TestEnvoyBinary(t)
	config := vsValidateConfig(t)
	services := validateFixture()
	pod := netip.MustParseAddr("10.1.0.1")
	sc := xdsgen.Sidecar{IP: pod, Namespace: "demo", Interception: xdsgen.InterceptRedirect, Inbound: xdsgen.SidecarInbound(services, "cluster-1", pod)}
	opts := xdsgen.Options{}
	routes := xdsgen.SidecarRoutes(services, config, opts)
	if !strings.Contains(routesText(routes), "typed_per_filter_config") {
		t.Fatalf("the VirtualService did not reach the routes")
	}
	for _, ms := range services {
		if notes := xdsgen.RouteNotes(xdsgen.ProxyEnvoy, ms.Service, config.Host(ms.Service.Hostname), ""); len(notes) > 0 {
			t.Errorf("Envoy left parts out: %v", notes)
		}
	}
	b := servedBootstrap(inlineRoutes(t, xdsgen.SidecarListeners(services, sc, opts), routes), xdsgen.SidecarClusters(services, config, sc, opts))
	runEnvoyValidate(t, bin, b)
}

func vsValidateConfig(t *testing.T) *istioconfig.Snapshot {
	t.Helper()
	decode := func(kind, spec string) proto.Message {
		msg, errs := validate.DecodeSpec(kind, []byte(spec))
		if len(errs) == 0 {
			errs = validate.Spec(msg)
		}
		if len(errs) > 0 {
			t.Fatalf("%s: %v", kind, errs)
		}
		return msg
	}
	meta := func(kind string) istioconfig.Meta {
		return istioconfig.Meta{Key: istioconfig.Key{Kind: kind, Namespace: "demo", Name: "echo"}, Generation: 1, Created: time.Unix(0, 0)}
	}
	return istioconfig.NewSnapshot(istioconfig.SnapshotOptions{}, []istioconfig.Object{
		&istioconfig.VirtualService{Meta: meta(validate.KindVirtualService), Spec: decode(validate.KindVirtualService, vsValidateSpec).(*networking.VirtualService)},
		&istioconfig.DestinationRule{Meta: meta(validate.KindDestinationRule), Spec: decode(validate.KindDestinationRule, drValidateSpec).(*networking.DestinationRule)},
	})
}

// inlineRoutes returns copies of listeners whose RDS references are
// replaced by the route configurations they name.
func inlineRoutes(t *testing.T, listeners []*listenerv3.Listener, routes []*routev3.RouteConfiguration) []*listenerv3.Listener {
	t.Helper()
	byName := map[string]*routev3.RouteConfiguration{}
	for _, r := range routes {
		byName[r.GetName()] = r
	}
	out := make([]*listenerv3.Listener, 0, len(listeners))
	for _, l := range listeners {
		l = proto.Clone(l).(*listenerv3.Listener)
		rewriteAll(t, l, func(m proto.Message) {
			if hcm, ok := m.(*hcmv3.HttpConnectionManager); ok && hcm.GetRds() != nil {
				rc := byName[hcm.GetRds().GetRouteConfigName()]
				if rc == nil {
					t.Fatalf("listener %s names route %q, which SidecarRoutes did not generate", l.GetName(), hcm.GetRds().GetRouteConfigName())
				}
				hcm.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: rc}
			}
		})
		out = append(out, l)
	}
	return out
}

func routesText(routes []*routev3.RouteConfiguration) string {
	var b strings.Builder
	for _, r := range routes {
		b.WriteString(r.String())
	}
	return b.String()
}
