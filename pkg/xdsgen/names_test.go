package xdsgen

import (
	"errors"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/pkg/model"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		host              model.Hostname
		port              uint32
		cluster, listener string
	}{
		{echoHost, 8080, "outbound|8080||echo.demo.svc.cluster.local", "echo.demo.svc.cluster.local:8080"},
		{"a.b.svc.example.com", 1, "outbound|1||a.b.svc.example.com", "a.b.svc.example.com:1"},
		{"x", 65535, "outbound|65535||x", "x:65535"},
	} {
		if got := ClusterName(tc.host, tc.port); got != tc.cluster {
			t.Errorf("ClusterName(%q, %d) = %q, want %q", tc.host, tc.port, got, tc.cluster)
		}
		if got := ListenerName(tc.host, tc.port); got != tc.listener {
			t.Errorf("ListenerName(%q, %d) = %q, want %q", tc.host, tc.port, got, tc.listener)
		}
		if got := RouteName(tc.host, tc.port); got != tc.listener {
			t.Errorf("RouteName(%q, %d) = %q, want %q", tc.host, tc.port, got, tc.listener)
		}
		if h, p, err := ParseClusterName(tc.cluster); err != nil || h != tc.host || p != tc.port {
			t.Errorf("ParseClusterName(%q) = %q, %d, %v; want %q, %d, nil", tc.cluster, h, p, err, tc.host, tc.port)
		}
		if h, p, err := ParseListenerName(tc.listener); err != nil || h != tc.host || p != tc.port {
			t.Errorf("ParseListenerName(%q) = %q, %d, %v; want %q, %d, nil", tc.listener, h, p, err, tc.host, tc.port)
		}
	}
}

func TestProxyGroupString(t *testing.T) {
	if got := (ProxyGroup{Cluster: "cluster-1", Region: "us-east"}).String(); got != "cluster-1/us-east" {
		t.Errorf("String() = %q", got)
	}
	if got := (ProxyGroup{Cluster: "cluster-1"}).String(); got != "cluster-1/" {
		t.Errorf("String() without region = %q", got)
	}
}

// malformedHosts are invalid in both kinds of name.
var malformedHosts = []string{
	"",                              // empty
	"Echo.demo.svc.cluster.local",   // upper case
	"echo..demo",                    // empty label
	".echo",                         // empty first label
	"echo.",                         // trailing dot
	"-echo.demo",                    // label starts with '-'
	"echo-.demo",                    // label ends with '-'
	"echo_1.demo",                   // underscore
	"echo demo",                     // space
	"echo|demo",                     // separator
	"[::1]",                         // not a DNS name
	strings.Repeat("a", 64) + ".b",  // label too long
	strings.Repeat("a.", 127) + "a", // 255 characters
}

func TestParseClusterNameMalformed(t *testing.T) {
	bad := []string{
		"",
		"outbound",
		"outbound|",
		"outbound|8080|",
		"outbound|8080|echo.demo",        // one separator
		"inbound|8080||echo.demo",        // direction
		"outbound|8080|v1|echo.demo",     // subset (ParseSubsetClusterName's)
		"outbound|8080|||echo.demo",      // stray separator
		"outbound||echo.demo",            // no port
		"outbound|0||echo.demo",          // port 0
		"outbound|65536||echo.demo",      // port too large
		"outbound|08080||echo.demo",      // leading zero
		"outbound|+80||echo.demo",        // sign
		"outbound|8o||echo.demo",         // not a number
		"outbound|123456||echo.demo",     // too many digits
		"outbound|8080||",                // no host
		"OUTBOUND|8080||echo.demo",       // case
		" outbound|8080||echo.demo",      // space
		"echo.demo.svc.cluster.local:80", // a listener name
		"xdstp://authority/envoy.config.cluster.v3.Cluster/x",
	}
	for _, h := range malformedHosts {
		bad = append(bad, "outbound|8080||"+h)
	}
	for _, name := range bad {
		if h, p, err := ParseClusterName(name); !errors.Is(err, ErrMalformedName) {
			t.Errorf("ParseClusterName(%q) = %q, %d, %v; want ErrMalformedName", name, h, p, err)
		}
	}
}

func TestParseListenerNameMalformed(t *testing.T) {
	bad := []string{
		"",
		"echo.demo",
		"echo.demo:",
		":8080",
		"echo.demo:0",
		"echo.demo:65536",
		"echo.demo:080",
		"echo.demo:-1",
		"echo.demo:http",
		"echo.demo:80:80",
		"[::1]:80",
		"outbound|8080||echo.demo",
		"xds:///echo.demo:8080",
	}
	for _, h := range malformedHosts {
		bad = append(bad, h+":8080")
	}
	for _, name := range bad {
		if h, p, err := ParseListenerName(name); !errors.Is(err, ErrMalformedName) {
			t.Errorf("ParseListenerName(%q) = %q, %d, %v; want ErrMalformedName", name, h, p, err)
		}
	}
}

// FuzzParseClusterName checks that ParseClusterName accepts exactly the
// names ClusterName produces: whatever it accepts maps back to the same
// string, and a hostname and port it returns round-trip through ClusterName.
func FuzzParseClusterName(f *testing.F) {
	for _, s := range []string{
		"outbound|8080||echo.demo.svc.cluster.local",
		"outbound|1||a",
		"outbound|65535||x-1.y-2",
		"outbound|08080||echo",
		"outbound|8080|v1|echo",
		"echo.demo:8080",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		h, p, err := ParseClusterName(name)
		if err != nil {
			if !errors.Is(err, ErrMalformedName) {
				t.Fatalf("ParseClusterName(%q): error %v does not wrap ErrMalformedName", name, err)
			}
			return
		}
		if got := ClusterName(h, p); got != name {
			t.Fatalf("ClusterName(ParseClusterName(%q)) = %q", name, got)
		}
		// The same hostname and port make a valid listener name too.
		if h2, p2, err := ParseListenerName(ListenerName(h, p)); err != nil || h2 != h || p2 != p {
			t.Fatalf("ParseListenerName(ListenerName(%q, %d)) = %q, %d, %v", h, p, h2, p2, err)
		}
	})
}

func TestSubsetClusterNames(t *testing.T) {
	for _, tc := range []struct {
		host   model.Hostname
		port   uint32
		subset string
		name   string
	}{
		{echoHost, 8080, "v1", "outbound|8080|v1|echo.demo.svc.cluster.local"},
		{echoHost, 8080, "", "outbound|8080||echo.demo.svc.cluster.local"},
		{"x", 1, "canary-2", "outbound|1|canary-2|x"},
	} {
		if got := SubsetClusterName(tc.host, tc.port, tc.subset); got != tc.name {
			t.Errorf("SubsetClusterName(%q, %d, %q) = %q, want %q", tc.host, tc.port, tc.subset, got, tc.name)
		}
		if h, p, s, err := ParseSubsetClusterName(tc.name); err != nil || h != tc.host || p != tc.port || s != tc.subset {
			t.Errorf("ParseSubsetClusterName(%q) = %q, %d, %q, %v", tc.name, h, p, s, err)
		}
	}
	if got := ClusterName(echoHost, 8080); got != SubsetClusterName(echoHost, 8080, "") {
		t.Errorf("ClusterName = %q, not the empty subset's", got)
	}
	for _, name := range []string{
		"outbound|8080|V1|echo.demo",                         // upper case
		"outbound|8080|-v1|echo.demo",                        // starts with '-'
		"outbound|8080|v.1|echo.demo",                        // not a label
		"outbound|8080|v1|",                                  // no hostname
		"outbound|8080|v1||echo.demo",                        // stray separator
		"outbound|8080|v1|echo|demo",                         // separator in hostname
		"outbound|8080|" + strings.Repeat("a", 64) + "|echo", // label too long
		"outbound|0|v1|echo.demo",                            // port 0
	} {
		if h, p, s, err := ParseSubsetClusterName(name); !errors.Is(err, ErrMalformedName) {
			t.Errorf("ParseSubsetClusterName(%q) = %q, %d, %q, %v; want ErrMalformedName", name, h, p, s, err)
		}
	}
}

// FuzzParseSubsetClusterName checks that ParseSubsetClusterName accepts
// exactly the names SubsetClusterName produces, and agrees with
// ParseClusterName on names without a subset.
func FuzzParseSubsetClusterName(f *testing.F) {
	for _, s := range []string{
		"outbound|8080|v1|echo.demo.svc.cluster.local",
		"outbound|8080||echo",
		"outbound|8080|V1|echo",
		"outbound|8080|v1|echo|x",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		h, p, subset, err := ParseSubsetClusterName(name)
		h0, p0, err0 := ParseClusterName(name)
		if err != nil {
			if !errors.Is(err, ErrMalformedName) {
				t.Fatalf("ParseSubsetClusterName(%q): error %v does not wrap ErrMalformedName", name, err)
			}
			if err0 == nil {
				t.Fatalf("ParseClusterName(%q) accepts what ParseSubsetClusterName refuses", name)
			}
			return
		}
		if got := SubsetClusterName(h, p, subset); got != name {
			t.Fatalf("SubsetClusterName(ParseSubsetClusterName(%q)) = %q", name, got)
		}
		if (err0 == nil) != (subset == "") || (err0 == nil && (h0 != h || p0 != p)) {
			t.Fatalf("ParseClusterName(%q) = %q, %d, %v; subset %q", name, h0, p0, err0, subset)
		}
	})
}

// FuzzParseListenerName is FuzzParseClusterName for listener names.
func FuzzParseListenerName(f *testing.F) {
	for _, s := range []string{
		"echo.demo.svc.cluster.local:8080",
		"a:1",
		"echo:080",
		"echo:8080:8080",
		"[::1]:80",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		h, p, err := ParseListenerName(name)
		if err != nil {
			if !errors.Is(err, ErrMalformedName) {
				t.Fatalf("ParseListenerName(%q): error %v does not wrap ErrMalformedName", name, err)
			}
			return
		}
		if got := ListenerName(h, p); got != name {
			t.Fatalf("ListenerName(ParseListenerName(%q)) = %q", name, got)
		}
		if h2, p2, err := ParseClusterName(ClusterName(h, p)); err != nil || h2 != h || p2 != p {
			t.Fatalf("ParseClusterName(ClusterName(%q, %d)) = %q, %d, %v", h, p, h2, p2, err)
		}
	})
}
