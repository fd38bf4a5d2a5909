// Command imagebuild writes an OCI image index of static binaries, one
// image per platform, on an empty base, as an OCI layout directory: no
// Docker engine, no registry, no base image to pull. `make images` runs it
// once per meshfed binary; `crane push DIR REF` or `skopeo copy
// oci:DIR docker://REF` publishes the result.
//
//	imagebuild -out bin/images/meshfed-hub -name meshfed-hub -version v0.1.0 \
//	    -revision <commit> -created <unix seconds> \
//	    linux/amd64=bin/images/linux-amd64/meshfed-hub linux/arm64=bin/images/linux-arm64/meshfed-hub
//
// Each image holds the binary at /usr/local/bin/<name> (mode 0755) and an
// empty /tmp (1777); it runs as the non-root user 65532:65532 with the
// binary as its entrypoint and carries the org.opencontainers.image.*
// labels. File times and the config's creation time are -created (the
// commit's time), so the same commit gives the same digests.
//
// It lives in its own module (like e2e/protogen) so that
// go-containerregistry is not a dependency of meshfed itself.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// User is the numeric user and group the images run as (distroless'
// "nonroot"): no passwd file is needed for a numeric user.
const User = "65532:65532"

// Options is the command line.
type Options struct {
	Out, Name, Version, Revision, Source, Description string
	Created                                           time.Time
	// Binaries maps "os/arch" to the binary built for it.
	Binaries map[string]string
}

func main() {
	var opts Options
	var created int64
	flag.StringVar(&opts.Out, "out", "", "OCI layout directory to write (replaced)")
	flag.StringVar(&opts.Name, "name", "", "binary name: the file under /usr/local/bin and the image title")
	flag.StringVar(&opts.Version, "version", "", "org.opencontainers.image.version and the layout's ref name")
	flag.StringVar(&opts.Revision, "revision", "", "org.opencontainers.image.revision")
	flag.StringVar(&opts.Source, "source", "https://github.com/meshfed/meshfed", "org.opencontainers.image.source")
	flag.StringVar(&opts.Description, "description", "", "org.opencontainers.image.description")
	flag.Int64Var(&created, "created", 0, "creation time, unix seconds (the commit's time, for reproducible digests)")
	flag.Parse()
	opts.Created = time.Unix(created, 0).UTC()
	opts.Binaries = map[string]string{}
	for _, arg := range flag.Args() {
		platform, path, ok := strings.Cut(arg, "=")
		if !ok {
			fail(fmt.Errorf("argument %q: want os/arch=path", arg))
		}
		opts.Binaries[platform] = path
	}
	if opts.Out == "" || opts.Name == "" || opts.Version == "" || len(opts.Binaries) == 0 {
		fail(fmt.Errorf("-out, -name, -version and at least one os/arch=path are required"))
	}
	if err := build(opts); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "imagebuild:", err)
	os.Exit(1)
}

// build writes the index of one image per platform to opts.Out.
func build(opts Options) error {
	labels := map[string]string{
		"org.opencontainers.image.title":    opts.Name,
		"org.opencontainers.image.version":  opts.Version,
		"org.opencontainers.image.revision": opts.Revision,
		"org.opencontainers.image.source":   opts.Source,
		"org.opencontainers.image.created":  opts.Created.Format(time.RFC3339),
	}
	if opts.Description != "" {
		labels["org.opencontainers.image.description"] = opts.Description
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, platform := range slices.Sorted(maps.Keys(opts.Binaries)) {
		osName, arch, ok := strings.Cut(platform, "/")
		if !ok {
			return fmt.Errorf("platform %q: want os/arch", platform)
		}
		img, err := image(opts, opts.Binaries[platform], osName, arch, labels)
		if err != nil {
			return fmt.Errorf("%s %s: %w", opts.Name, platform, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}},
		})
	}
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)
	if err := os.RemoveAll(opts.Out); err != nil {
		return err
	}
	p, err := layout.Write(opts.Out, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": opts.Version}))
}

func image(opts Options, binary, osName, arch string, labels map[string]string) (v1.Image, error) {
	layerTar, err := rootfs(opts.Name, binary, opts.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = osName, arch
	cfg.Created = v1.Time{Time: opts.Created}
	cfg.Config.Entrypoint = []string{"/usr/local/bin/" + opts.Name}
	cfg.Config.User = User
	cfg.Config.WorkingDir = "/"
	cfg.Config.Labels = labels
	cfg.Config.Env = []string{"PATH=/usr/local/bin"}
	return mutate.ConfigFile(img, cfg)
}

// rootfs is the image's one layer: /usr/local/bin/<name> and /tmp.
func rootfs(name, binary string, mtime time.Time) ([]byte, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := []struct {
		path string
		mode int64
	}{{"usr/", 0o755}, {"usr/local/", 0o755}, {"usr/local/bin/", 0o755}, {"tmp/", 0o1777}}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d.path, Mode: d.mode, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: filepath.Join("usr/local/bin", name), Mode: 0o755, Size: int64(len(bin)), ModTime: mtime, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
