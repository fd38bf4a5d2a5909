package testutil

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/ instead of comparing with them")

// Updating reports whether the test runs with -update: Golden then
// rewrites the files. For tests with golden output of their own shape
// (scenario scripts, say).
func Updating() bool { return *update }

// Golden compares got with the file at path (relative to the test's
// package directory, e.g. "testdata/table.golden") and fails t, showing
// both, when they differ or the file is missing. With -update it writes
// got to path instead (creating its directory).
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file %s: %v (run with -update to write it)", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (run with -update to accept it)\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

// FirstDiff shows the first line where got departs from want, for a test
// failure that names it rather than printing two whole documents.
func FirstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(wl), len(gl)) {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("line %d:\n  want: %s\n  got:  %s", i+1, w, g)
		}
	}
	return "(no line differs)"
}
