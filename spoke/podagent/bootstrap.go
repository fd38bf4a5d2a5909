package podagent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/xdsnode"
)

// LocalityLabel is the Pod label of its locality, "region.zone.subzone"
// (zone and subzone optional), as Istio names it.
const LocalityLabel = "istio-locality"

// Bootstrap returns grpc-go's xDS bootstrap (indented JSON, see
// xdsnode.Bootstrap) for the Pod that opts describe, with its labels: the
// xDS server DiscoveryAddress over mutual TLS with the workload's
// certificate (plaintext with XDSPlaintext), the node (its Istio node ID,
// metadata, and locality from the istio-locality label), a file_watcher
// certificate provider reading the agent's files in CertDir, and Istio's
// inbound listener name template. Only the fields it uses are checked (not
// the CA's); defaults apply as in Run.
func Bootstrap(opts Options, labels map[string]string) ([]byte, error) {
	opts = opts.withDefaults()
	if err := invalid(opts.validateBootstrap()); err != nil {
		return nil, err
	}
	b, err := xdsnode.Bootstrap{
		ServerURI: opts.DiscoveryAddress,
		ServerTLS: !opts.XDSPlaintext,
		NodeID:    xdsnode.SidecarID(opts.InstanceIP, opts.PodName, opts.PodNamespace, opts.DomainSuffix),
		Metadata: xdsnode.Metadata{
			ClusterID:      model.ClusterID(opts.ClusterID),
			Namespace:      opts.PodNamespace,
			Network:        opts.Network,
			Labels:         labels,
			Generator:      xdsnode.GeneratorGRPC,
			InstanceIPs:    opts.InstanceIP,
			ServiceAccount: opts.ServiceAccount,
		},
		Locality:            localityOf(labels),
		CertDir:             opts.CertDir,
		CertRefreshInterval: opts.CertRefreshInterval,
	}.JSON()
	if err != nil {
		return nil, fmt.Errorf("podagent: %w", err)
	}
	return b, nil
}

// localityOf parses the istio-locality label, "region.zone.subzone" with
// zone and subzone optional (a subzone may hold dots); zero without one.
func localityOf(labels map[string]string) model.Locality {
	v := strings.TrimSpace(labels[LocalityLabel])
	if v == "" {
		return model.Locality{}
	}
	parts := strings.SplitN(v, ".", 3)
	parts = append(parts, "", "")
	return model.Locality{Region: parts[0], Zone: parts[1], SubZone: parts[2]}
}

// ParseLabels parses the downward API file of a Pod's labels: one
// key="value" a line, the value quoted as Go quotes strings (so that any
// byte may appear in it). Blank lines are skipped; any other line that is
// not of that form, or repeats a key, is an error naming its line number.
func ParseLabels(data []byte) (map[string]string, error) {
	labels := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		key, quoted, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("podagent: labels line %d: no '='", i+1)
		}
		if key == "" || strings.ContainsAny(key, " \t\"") {
			return nil, fmt.Errorf("podagent: labels line %d: bad key %q", i+1, key)
		}
		if !strings.HasPrefix(quoted, `"`) {
			return nil, fmt.Errorf("podagent: labels line %d: value of %q is not a double-quoted string", i+1, key)
		}
		value, err := strconv.Unquote(quoted)
		if err != nil {
			return nil, fmt.Errorf("podagent: labels line %d: value of %q: %w", i+1, key, err)
		}
		if _, dup := labels[key]; dup {
			return nil, fmt.Errorf("podagent: labels line %d: key %q repeated", i+1, key)
		}
		labels[key] = value
	}
	return labels, nil
}

// readLabels reads and parses a labels file; no file (or no path) means no
// labels.
func readLabels(path string) (map[string]string, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("podagent: labels: %w", err)
	}
	labels, err := ParseLabels(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return labels, nil
}

// writeFileAtomic makes path hold data, mode 0644, in one rename: readers
// see the old file or the new one, never a part. It creates the directory.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("podagent: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("podagent: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}()
	_, werr := f.Write(data)
	cherr := f.Chmod(0o644)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, cherr, serr, cerr); err != nil {
		return fmt.Errorf("podagent: writing %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("podagent: %w", err)
	}
	return nil
}
