package framework

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/client-go/discovery"
)

// Watches counts the WATCH requests the cluster's apiserver is serving now
// for resource (e.g. "endpointslices"), from its own
// apiserver_longrunning_requests metric: the apiserver's word, not the
// hub's. The apiserver's own loopback watches are included; compare with a
// count taken before the hubs start.
func (c *Cluster) Watches(ctx context.Context, resource string) (int, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig())
	if err != nil {
		return 0, err
	}
	body, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("framework: %s: reading apiserver metrics: %w", c.name, err)
	}
	total := 0
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") ||
			!strings.Contains(line, `verb="WATCH"`) || !strings.Contains(line, `resource="`+resource+`"`) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("framework: %s: bad metric line %q", c.name, line)
		}
		total += int(v)
	}
	return total, sc.Err()
}

// FreeAddrs returns n distinct free TCP addresses on 127.0.0.1, for
// listeners a test passes to hubs (gossip, peer).
func FreeAddrs(n int) ([]string, error) { return freeAddrs(n) }
