// Command meshfed-chartpack packages the Helm charts under remote-charts/
// as release artifacts, stamped with the build's version: each chart's
// version is the stamped version without its leading "v" (SemVer, as Helm
// wants it) and its appVersion the stamped version itself, which is the tag
// `make images` gives the images, so that a packaged chart's default image
// is the image of the same build.
//
//	meshfed-chartpack -version v0.1.0-dev.42.gabc1234 -out bin/charts remote-charts/hub remote-charts/spoke
//
// It writes <out>/<name>-<version>.tgz, as `helm package --version V
// --app-version A` would, with Helm's own packaging code.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

func main() {
	version := flag.String("version", "", "the stamped version (make version)")
	out := flag.String("out", "", "directory of the packaged charts")
	flag.Parse()
	if *version == "" || *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: meshfed-chartpack -version V -out DIR CHART_DIR...")
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	for _, dir := range flag.Args() {
		path, err := pack(dir, *version, *out)
		if err != nil {
			fail(err)
		}
		fmt.Println(path)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "meshfed-chartpack:", err)
	os.Exit(1)
}

// pack loads the chart at dir, stamps it and saves it into out.
func pack(dir, version, out string) (string, error) {
	ch, err := loader.LoadDir(dir)
	if err != nil {
		return "", fmt.Errorf("%s: %w", dir, err)
	}
	ch.Metadata.Version = strings.TrimPrefix(version, "v")
	ch.Metadata.AppVersion = version
	if err := ch.Validate(); err != nil {
		return "", fmt.Errorf("%s stamped %s: %w", dir, version, err)
	}
	path, err := chartutil.Save(ch, out)
	if err != nil {
		return "", fmt.Errorf("%s: %w", dir, err)
	}
	return path, nil
}
