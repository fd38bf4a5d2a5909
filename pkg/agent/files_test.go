package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteGeneration(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	// A regular file from an earlier writer is replaced by the link.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, KeyFile), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	for gen, content := range []string{"one", "two", "three"} {
		err := writeGeneration(dir, []file{
			{CertChainFile, []byte("cert " + content), 0o644},
			{KeyFile, []byte("key " + content), 0o600},
		})
		if err != nil {
			t.Fatalf("generation %d: %v", gen, err)
		}
		for _, name := range []string{CertChainFile, KeyFile} {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasSuffix(string(got), content) {
				t.Errorf("generation %d: %s = %q", gen, name, got)
			}
			if target, err := os.Readlink(filepath.Join(dir, name)); err != nil || target != filepath.Join(dataLink, name) {
				t.Errorf("%s links to %q (%v)", name, target, err)
			}
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		gens := 0
		for _, e := range entries {
			names = append(names, e.Name())
			if strings.HasPrefix(e.Name(), genPrefix) {
				gens++
			}
		}
		if gens != 1 || len(entries) != 4 {
			t.Errorf("generation %d: directory holds %v, want one generation, ..data and two links", gen, names)
		}
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v (%v)", st.Mode(), err)
	}
}
