package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// File names in Options.Dir, as istio-agent names them.
const (
	CertChainFile = "cert-chain.pem"
	KeyFile       = "key.pem"
	RootCertFile  = "root-cert.pem"
)

const (
	dataLink  = "..data"
	genPrefix = "..gen-"
)

// file is one file of a generation.
type file struct {
	name string
	data []byte
	mode os.FileMode
}

// writeGeneration makes files the contents of dir in one step: it writes
// them into a new hidden directory, points the symlink dir/..data at it by
// an atomic rename, makes each dir/<name> a symlink to ..data/<name> (once),
// and removes older generations.
func writeGeneration(dir string, files []file) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	gen, err := os.MkdirTemp(dir, genPrefix)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(gen)
		}
	}()
	if err := os.Chmod(gen, 0o755); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	for _, f := range files {
		if err := writeSynced(filepath.Join(gen, f.name), f.data, f.mode); err != nil {
			return err
		}
	}
	if err := replaceSymlink(filepath.Base(gen), filepath.Join(dir, dataLink)); err != nil {
		return err
	}
	for _, f := range files {
		link, target := filepath.Join(dir, f.name), filepath.Join(dataLink, f.name)
		if cur, err := os.Readlink(link); err == nil && cur == target {
			continue
		}
		if err := replaceSymlink(target, link); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), genPrefix) && e.Name() != filepath.Base(gen) {
			errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("agent: removing old generations: %w", err)
	}
	return nil
}

// replaceSymlink makes link a symlink to target, atomically replacing
// whatever link was.
func replaceSymlink(target, link string) error {
	tmp := link + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("agent: %w", err)
	}
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// writeSynced writes a new file and flushes it to disk before the rename
// that publishes it.
func writeSynced(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("agent: writing %s: %w", path, err)
	}
	return nil
}
