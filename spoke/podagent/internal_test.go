package podagent

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshfed/meshfed/pkg/model"
)

func TestLocalityOf(t *testing.T) {
	for _, tc := range []struct {
		label string
		want  model.Locality // zero: no locality
	}{
		{"", model.Locality{}},
		{"  ", model.Locality{}},
		{"us-east1", model.Locality{Region: "us-east1"}},
		{"us-east1.us-east1-b", model.Locality{Region: "us-east1", Zone: "us-east1-b"}},
		{"us-east1.us-east1-b.rack-7", model.Locality{Region: "us-east1", Zone: "us-east1-b", SubZone: "rack-7"}},
		{"r.z.sub.zone.with.dots", model.Locality{Region: "r", Zone: "z", SubZone: "sub.zone.with.dots"}},
		{"r..s", model.Locality{Region: "r", SubZone: "s"}},
		{"..", model.Locality{}},
	} {
		if got := localityOf(map[string]string{LocalityLabel: tc.label}); got != tc.want {
			t.Errorf("localityOf(%q) = %+v, want %+v", tc.label, got, tc.want)
		}
	}
	if got := localityOf(map[string]string{"app": "x"}); got != (model.Locality{}) {
		t.Errorf("locality %+v without the label", got)
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etc", "istio", "proxy")
	path := filepath.Join(dir, "grpc-bootstrap.json")
	for _, content := range []string{"first", "second"} {
		if err := writeFileAtomic(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != content {
			t.Errorf("content %q, want %q", got, content)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("mode %v, want 0644", fi.Mode().Perm())
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only the bootstrap (no temporary files)", names)
	}
}

func TestReadiness(t *testing.T) {
	r := &readiness{}
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, ReadyPath, nil))
		body, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, strings.TrimSpace(string(body))
	}
	r.set(reasonNoCert)
	if code, body := get(); code != http.StatusServiceUnavailable || body != reasonNoCert {
		t.Errorf("before the certificate: %d %q", code, body)
	}
	r.setReady()
	if code, body := get(); code != http.StatusOK || body != "ready" {
		t.Errorf("once ready: %d %q", code, body)
	}
}
