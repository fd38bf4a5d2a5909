package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/model"
)

// remoteClustersDoc is what `remote-clusters -o json` writes.
type remoteClustersDoc struct {
	Replica      string                 `json:"replica"`
	Clusters     []remoteCluster        `json:"clusters"`
	SecretErrors []debugdoc.SecretError `json:"secretErrors,omitempty"`
	// Networks are the fleet's networks and their gateways, absent in a
	// fleet of one network.
	Networks *model.NetworkGateways `json:"networks,omitempty"`
}

// remoteCluster is one row of remote-clusters. Owners is empty when the
// hub does not report ownership or the cluster has no owner.
type remoteCluster struct {
	Cluster   string   `json:"cluster"`
	Secret    string   `json:"secret"`
	State     string   `json:"state"`
	Owners    []string `json:"owners,omitempty"`
	Services  int      `json:"services"`
	Endpoints int      `json:"endpoints"`
	Error     string   `json:"error"`
	// Since is when the cluster entered State on the answering replica.
	Since time.Time `json:"since,omitzero"`
	// StalePolicy is what becomes of its endpoints while it is
	// unreachable ("keep" or "drop-after=<duration>"); EndpointsDropped is
	// when they were dropped under it, absent while they are served.
	StalePolicy      string    `json:"stalePolicy,omitempty"`
	EndpointsDropped time.Time `json:"endpointsDropped,omitzero"`
	// DiscoverySelector narrows what is discovered in it (the remote
	// secret's meshfed.io/discovery-selector); absent: no narrowing.
	DiscoverySelector string `json:"discoverySelector,omitempty"`
	// Network is the cluster's network; absent when unknown.
	Network string `json:"network,omitempty"`
	// Spoke is the spoke's version and health, "" when its trust-bundle
	// stream is not on the answering replica.
	Spoke string `json:"spoke,omitempty"`
}

// errNotFound is returned by getJSON for a 404.
var errNotFound = errors.New("not found")

// getDoc fetches the /debug document at path from the hub's monitoring
// port (opts.Monitoring: an address, or an http:// URL) into v. Errors
// name the hub.
func getDoc(ctx context.Context, opts Options, path string, v any) error {
	base := opts.Monitoring
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	client := &http.Client{Timeout: opts.Timeout}
	token, err := opts.HubAuth.token()
	if err != nil {
		return err
	}
	if opts.HubAuth.Kubeconfig {
		if client.Transport, err = kubeconfigTransport(opts.Kube); err != nil {
			return err
		}
	}
	if err := getJSON(ctx, client, strings.TrimSuffix(base, "/")+path, token, v); err != nil {
		return fmt.Errorf("hub %s: %w", opts.Monitoring, err)
	}
	return nil
}

func remoteClusters(ctx context.Context, opts Options, stdout io.Writer) error {
	var reg debugdoc.Registryz
	if err := getDoc(ctx, opts, debugdoc.RegistryzPath, &reg); err != nil {
		return err
	}
	// Ownership is optional: a hub without federation has no federationz.
	owners := map[string][]string{}
	var fed debugdoc.Federationz
	haveOwners := getDoc(ctx, opts, debugdoc.FederationzPath, &fed) == nil
	for _, c := range fed.Clusters {
		owners[string(c.ID)] = c.Owners
	}

	// Spokes are optional too: a hub without the CA has no spokez.
	spokes := map[string]string{}
	var sz debugdoc.Spokez
	if getDoc(ctx, opts, debugdoc.SpokezPath, &sz) == nil {
		for _, sp := range sz {
			health := "down"
			if sp.Healthy {
				health = "healthy"
				if len(sp.Hubs) > 0 {
					health += " via " + strings.Join(sp.Hubs, ",")
				}
			}
			spokes[string(sp.Cluster)] = dash(sp.Version) + " (" + health + ")"
		}
	}

	doc := remoteClustersDoc{Replica: reg.Replica, Clusters: []remoteCluster{}, SecretErrors: reg.SecretErrors, Networks: reg.Networks}
	for _, c := range reg.Clusters {
		id := string(c.ID)
		row := remoteCluster{
			Cluster: id, Secret: c.Secret, State: string(c.State),
			Services: c.Services, Endpoints: c.Endpoints, Error: c.Error, Spoke: spokes[id],
			Since: c.Since, StalePolicy: c.StalePolicy, EndpointsDropped: c.EndpointsDropped,
			DiscoverySelector: c.DiscoverySelector, Network: string(c.Network),
		}
		if haveOwners {
			row.Owners = owners[id]
		}
		doc.Clusters = append(doc.Clusters, row)
	}
	if opts.Output == outputJSON {
		return writeIndentedJSON(stdout, doc)
	}
	return writeRemoteClusters(stdout, doc, haveOwners)
}

func writeRemoteClusters(w io.Writer, doc remoteClustersDoc, haveOwners bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tSECRET\tSTATE\tSINCE\tSTALE\tSCOPE\tNETWORK\tOWNERS\tSERVICES\tENDPOINTS\tSPOKE\tERROR")
	for _, c := range doc.Clusters {
		own := "-"
		if haveOwners && len(c.Owners) > 0 {
			own = strings.Join(c.Owners, ",")
		}
		since := "-"
		if !c.Since.IsZero() {
			since = c.Since.UTC().Format(time.RFC3339)
		}
		stale := dash(c.StalePolicy)
		if !c.EndpointsDropped.IsZero() {
			stale += " (dropped " + c.EndpointsDropped.UTC().Format(time.RFC3339) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Cluster, dash(c.Secret), dash(c.State), since, stale, dash(c.DiscoverySelector), dash(c.Network), own,
			strconv.Itoa(c.Services), strconv.Itoa(c.Endpoints), dash(c.Spoke), dash(oneLine(c.Error)))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing table: %w", err)
	}
	if err := writeNetworks(w, doc.Networks); err != nil {
		return err
	}
	if len(doc.SecretErrors) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "REJECTED SECRETS:")
		for _, e := range doc.SecretErrors {
			if _, err := fmt.Fprintf(w, "  %s: %s\n", e.Secret, oneLine(e.Error)); err != nil {
				return fmt.Errorf("writing table: %w", err)
			}
		}
	}
	return nil
}

// writeNetworks lists each network's gateway addresses, then the
// problems of the gateways and networks.
func writeNetworks(w io.Writer, nets *model.NetworkGateways) error {
	if nets == nil || len(nets.Networks) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "NETWORKS:")
	for _, n := range nets.Networks {
		var gws []string
		for _, g := range nets.Of(n) {
			gws = append(gws, fmt.Sprintf("%s (%s %s)", netip.AddrPortFrom(g.Address, uint16(g.Port)), g.Cluster, g.Service))
		}
		if len(gws) == 0 {
			gws = []string{"no usable gateway"}
		}
		fmt.Fprintf(w, "  %s: %s\n", n, strings.Join(gws, ", "))
	}
	for _, p := range nets.Problems {
		where := ""
		if p.Cluster != "" {
			where = fmt.Sprintf(" %s %s", p.Cluster, p.Service)
		}
		if _, err := fmt.Fprintf(w, "  problem %s%s: %s\n", p.Network, where, oneLine(p.Message)); err != nil {
			return fmt.Errorf("writing table: %w", err)
		}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a table row on one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// getJSON GETs url (with the bearer token, when not empty) into v.
func getJSON(ctx context.Context, client *http.Client, url, token string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err // names the method and URL already
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("GET %s: %w", url, errNotFound)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("GET %s: decoding: %w", url, err)
	}
	return nil
}
