package version

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestResolve(t *testing.T) {
	vcs := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	for _, tc := range []struct {
		name     string
		ver, rev string
		bi       *debug.BuildInfo
		want     Info
	}{
		{"stamped", "v0.1.0", "f00d", vcs, Info{Version: "v0.1.0", Revision: "f00d", GoVersion: "go1.26.8"}},
		{"stamped version only: Go's revision", "v0.1.0", "", vcs, Info{Version: "v0.1.0", Revision: "abc123", GoVersion: "go1.26.8"}},
		{"unstamped, modified tree", "", "", vcs, Info{Version: "devel-dirty", Revision: "abc123", GoVersion: "go1.26.8"}},
		{"unstamped module dependency", "", "", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}}, Info{Version: "v0.3.0", GoVersion: "go1.26.8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := resolve(tc.ver, tc.rev, tc.bi); got != tc.want {
				t.Errorf("resolve = %+v, want %+v", got, tc.want)
			}
		})
	}
	if got := resolve("", "", nil); got.Version != "devel" || got.GoVersion == "" {
		t.Errorf("no build info: %+v", got)
	}
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector())
	i := Get()
	want := `# HELP meshfed_build_info The build of this binary: version, revision and Go version as labels; always 1.
# TYPE meshfed_build_info gauge
meshfed_build_info{goversion="` + i.GoVersion + `",revision="` + i.Revision + `",version="` + i.Version + `"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), BuildInfoMetric); err != nil {
		t.Error(err)
	}
	if s := i.String(); !strings.HasPrefix(s, i.Version+" (revision ") || !strings.HasSuffix(s, i.GoVersion+")") {
		t.Errorf("String() = %q", s)
	}
}
