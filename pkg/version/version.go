package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Set at link time by the Makefile:
//
//	-ldflags "-X github.com/meshfed/meshfed/pkg/version.version=v0.1.0 -X github.com/meshfed/meshfed/pkg/version.revision=<sha>"
var (
	version  string
	revision string
)

// Info identifies a build.
type Info struct {
	// Version is the stamped version ("v0.1.0", "v0.1.0-dev.42.gabc1234",
	// with "-dirty" for a build of uncommitted changes), else the module's
	// version, else "devel".
	Version string `json:"version"`
	// Revision is the commit the build is of, when known.
	Revision string `json:"revision,omitempty"`
	// GoVersion is the toolchain that built it.
	GoVersion string `json:"goVersion"`
}

// String is "<version> (revision <rev>, <go version>)".
func (i Info) String() string {
	rev := i.Revision
	if rev == "" {
		rev = "unknown"
	}
	return fmt.Sprintf("%s (revision %s, %s)", i.Version, rev, i.GoVersion)
}

var (
	once sync.Once
	info Info
)

// Get returns this binary's Info.
func Get() Info {
	once.Do(func() { info = resolve(version, revision, readBuildInfo()) })
	return info
}

func readBuildInfo() *debug.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	return bi
}

// resolve is Get's logic: the stamp wins; an unstamped build falls back to
// what Go recorded.
func resolve(stampVersion, stampRevision string, bi *debug.BuildInfo) Info {
	out := Info{Version: stampVersion, Revision: stampRevision, GoVersion: runtime.Version()}
	if bi == nil {
		if out.Version == "" {
			out.Version = "devel"
		}
		return out
	}
	if bi.GoVersion != "" {
		out.GoVersion = bi.GoVersion
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if out.Revision == "" {
				out.Revision = s.Value
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if out.Version == "" {
		out.Version = bi.Main.Version
		if out.Version == "" || out.Version == "(devel)" {
			out.Version = "devel"
			if modified {
				out.Version += "-dirty"
			}
		}
	}
	return out
}

// BuildInfoMetric is the name of the gauge NewCollector exports.
const BuildInfoMetric = "meshfed_build_info"

// NewCollector returns the gauge meshfed_build_info{version,revision,goversion},
// always 1, of this binary: a query joins on it to tell which build runs
// where.
func NewCollector() prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        BuildInfoMetric,
		Help:        "The build of this binary: version, revision and Go version as labels; always 1.",
		ConstLabels: prometheus.Labels{"version": i.Version, "revision": i.Revision, "goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}
