package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// envImagesDir names the directory `make images` writes the OCI layouts to.
const envImagesDir = "MESHFED_IMAGES_DIR"

// ociDescriptor, ociIndex, ociManifest and ociConfig are the parts of the
// OCI image spec the test reads (by hand: the test checks the layout, not
// the library that wrote it).
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

type ociIndex struct {
	MediaType string          `json:"mediaType"`
	Manifests []ociDescriptor `json:"manifests"`
}

type ociManifest struct {
	MediaType string          `json:"mediaType"`
	Config    ociDescriptor   `json:"config"`
	Layers    []ociDescriptor `json:"layers"`
}

type ociConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Config       struct {
		Entrypoint []string          `json:"Entrypoint"`
		User       string            `json:"User"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
}

// TestImages reads back each image `make images` wrote: an OCI layout whose
// index names the stamped version and holds linux/amd64 and linux/arm64;
// each image runs its static binary as a non-root user, carries the
// org.opencontainers.image labels, and the amd64 binary, extracted, prints
// the stamped version.
func TestImages(t *testing.T) {
	dir := os.Getenv(envImagesDir)
	if dir == "" {
		t.Fatalf("%s is not set: run `make e2e`, which runs `make images`", envImagesDir)
	}
	want, rev := stampedVersion(t)
	for _, name := range []string{"meshfed-hub", "meshfed-spoke", "meshfed-agent"} {
		t.Run(name, func(t *testing.T) {
			l := ociLayout{t: t, dir: filepath.Join(dir, name)}
			var layoutFile struct {
				Version string `json:"imageLayoutVersion"`
			}
			if err := json.Unmarshal(l.file("oci-layout"), &layoutFile); err != nil || layoutFile.Version != "1.0.0" {
				t.Fatalf("oci-layout: %v %+v", err, layoutFile)
			}
			var top ociIndex
			l.decode(l.file("index.json"), &top)
			if len(top.Manifests) != 1 || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != want {
				t.Fatalf("index.json %+v: want one index named %s", top.Manifests, want)
			}
			var idx ociIndex
			l.decode(l.blob(top.Manifests[0]), &idx)
			var platforms []string
			var total int64
			for _, m := range idx.Manifests {
				if m.Platform == nil {
					t.Fatalf("manifest %s has no platform", m.Digest)
				}
				platform := m.Platform.OS + "/" + m.Platform.Architecture
				platforms = append(platforms, platform)
				var man ociManifest
				l.decode(l.blob(m), &man)
				var cfg ociConfig
				l.decode(l.blob(man.Config), &cfg)
				if cfg.OS+"/"+cfg.Architecture != platform {
					t.Errorf("%s: config says %s/%s", platform, cfg.OS, cfg.Architecture)
				}
				entry := "/usr/local/bin/" + name
				if !slices.Equal(cfg.Config.Entrypoint, []string{entry}) {
					t.Errorf("%s: entrypoint %q, want %s", platform, cfg.Config.Entrypoint, entry)
				}
				if u := cfg.Config.User; u == "" || u == "0" || u == "root" || strings.HasPrefix(u, "0:") {
					t.Errorf("%s: user %q, want a non-root user", platform, u)
				}
				for k, v := range map[string]string{
					"org.opencontainers.image.title": name, "org.opencontainers.image.version": want,
					"org.opencontainers.image.revision": rev,
				} {
					if cfg.Config.Labels[k] != v {
						t.Errorf("%s: label %s = %q, want %q", platform, k, cfg.Config.Labels[k], v)
					}
				}
				if cfg.Config.Labels["org.opencontainers.image.source"] == "" || cfg.Config.Labels["org.opencontainers.image.created"] == "" {
					t.Errorf("%s: labels %v lack source or created", platform, cfg.Config.Labels)
				}
				if len(man.Layers) != 1 {
					t.Fatalf("%s: %d layers, want 1 (the binary on an empty base)", platform, len(man.Layers))
				}
				total += man.Layers[0].Size
				bin := l.extract(man.Layers[0], strings.TrimPrefix(entry, "/"))
				checkStatic(t, platform, bin)
				if platform == "linux/amd64" {
					path := filepath.Join(t.TempDir(), name)
					if err := os.WriteFile(path, bin, 0o755); err != nil {
						t.Fatal(err)
					}
					out, err := exec.CommandContext(t.Context(), path, "--version").CombinedOutput()
					if prefix := name + " " + want + " (revision " + rev; err != nil || !strings.HasPrefix(string(out), prefix) {
						t.Errorf("the image's binary says %q (%v), want %q…", out, err, prefix)
					}
				}
			}
			slices.Sort(platforms)
			if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
				t.Errorf("platforms %v, want linux/amd64 and linux/arm64", platforms)
			}
			t.Logf("%s %s: %s compressed over both platforms", name, want, mib(total))
		})
	}
}

// checkStatic fails unless bin is an ELF executable of the platform's
// machine with no program interpreter (CGO_ENABLED=0: nothing to load
// from an empty image).
func checkStatic(t *testing.T, platform string, bin []byte) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("%s: the binary is no ELF file: %v", platform, err)
	}
	machine := map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}[platform]
	if f.Machine != machine {
		t.Errorf("%s: binary for %v, want %v", platform, f.Machine, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: the binary is dynamically linked (it has an interpreter)", platform)
		}
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// ociLayout reads an OCI layout directory, checking each blob's digest.
type ociLayout struct {
	t   *testing.T
	dir string
}

func (l ociLayout) file(name string) []byte {
	l.t.Helper()
	b, err := os.ReadFile(filepath.Join(l.dir, name))
	if err != nil {
		l.t.Fatal(err)
	}
	return b
}

func (l ociLayout) blob(d ociDescriptor) []byte {
	l.t.Helper()
	algo, hexDigest, ok := strings.Cut(d.Digest, ":")
	if !ok || algo != "sha256" {
		l.t.Fatalf("digest %q: want sha256:<hex>", d.Digest)
	}
	b := l.file(filepath.Join("blobs", algo, hexDigest))
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != hexDigest || int64(len(b)) != d.Size {
		l.t.Fatalf("blob %s: content does not match its digest or size %d", d.Digest, d.Size)
	}
	return b
}

func (l ociLayout) decode(b []byte, v any) {
	l.t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		l.t.Fatalf("%s: %v", b, err)
	}
}

// extract returns the file at path in a gzip-compressed tar layer.
func (l ociLayout) extract(layer ociDescriptor, path string) []byte {
	l.t.Helper()
	if layer.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
		l.t.Fatalf("layer media type %q", layer.MediaType)
	}
	zr, err := gzip.NewReader(bytes.NewReader(l.blob(layer)))
	if err != nil {
		l.t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			l.t.Fatalf("layer %s has no %s", layer.Digest, path)
		}
		if err != nil {
			l.t.Fatal(err)
		}
		if h.Name == path {
			if h.Mode&0o111 == 0 {
				l.t.Errorf("%s is not executable (mode %o)", path, h.Mode)
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				l.t.Fatal(err)
			}
			return b
		}
	}
}
