package proxystatus

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Sort orders recs by name, then cluster, then node ID, then replica, in
// place.
func Sort(recs []Record) {
	slices.SortFunc(recs, compareRecords)
}

func compareRecords(a, b Record) int {
	return cmp.Or(
		cmp.Compare(a.Name, b.Name),
		cmp.Compare(a.Cluster, b.Cluster),
		cmp.Compare(a.Proxy, b.Proxy),
		cmp.Compare(a.Replica, b.Replica),
	)
}

// sorted returns a sorted copy of recs.
func sorted(recs []Record) []Record {
	out := slices.Clone(recs)
	Sort(out)
	return out
}

func newTabWriter(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteTable writes recs as `istioctl proxy-status` does, with the columns
// NAME CLUSTER CDS LDS EDS RDS ECDS HUB VERSION, sorted by name then
// cluster. A type the proxy never subscribed to shows NOT SENT; HUB is the
// replica serving the proxy.
func WriteTable(w io.Writer, recs []Record) error {
	tw := newTabWriter(w)
	fmt.Fprintln(tw, "NAME\tCLUSTER\tCDS\tLDS\tEDS\tRDS\tECDS\tHUB\tVERSION")
	for _, r := range sorted(recs) {
		cells := []string{orDash(r.Name), orDash(r.Cluster)}
		for _, t := range TableTypes() {
			cells = append(cells, string(r.Status(t)))
		}
		cells = append(cells, orDash(r.Replica), orDash(r.Version))
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("proxystatus: writing table: %w", err)
	}
	return nil
}

// DetailTypes returns the short types of r in the order a detail lists
// them: the table's types, then the others sorted.
func DetailTypes(r Record) []string {
	out := TableTypes()
	var extra []string
	for k := range r.Types {
		if !slices.Contains(out, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	return append(out, extra...)
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// WriteDetail writes one proxy's status per type: versions and nonces sent
// and ACKed, when, and every NACK with the proxy's error message.
func WriteDetail(w io.Writer, r Record) error {
	tw := newTabWriter(w)
	fmt.Fprintf(tw, "NAME:\t%s\n", orDash(r.Name))
	fmt.Fprintf(tw, "PROXY:\t%s\n", orDash(r.Proxy))
	fmt.Fprintf(tw, "CLUSTER:\t%s\n", orDash(r.Cluster))
	fmt.Fprintf(tw, "HUB:\t%s\n", orDash(r.Replica))
	if r.HubVersion != "" {
		fmt.Fprintf(tw, "HUB VERSION:\t%s\n", r.HubVersion)
	}
	fmt.Fprintf(tw, "VERSION:\t%s\n", orDash(r.Version))
	fmt.Fprintf(tw, "CONNECTED:\t%s\n", formatTime(r.Connected))
	fmt.Fprintf(tw, "LAST CHANGE:\t%s\n", formatTime(r.LastChange))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("proxystatus: writing detail: %w", err)
	}
	fmt.Fprintln(w)

	tw = newTabWriter(w)
	fmt.Fprintln(tw, "TYPE\tSTATUS\tSENT\tSENT NONCE\tSENT AT\tACKED\tACKED NONCE\tACKED AT")
	var nacks []string
	for _, k := range DetailTypes(r) {
		ts := r.Types[k]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k, r.Status(k),
			orDash(ts.Sent), orDash(ts.SentNonce), formatTime(ts.SentAt),
			orDash(ts.Acked), orDash(ts.AckedNonce), formatTime(ts.AckedAt))
		if ts.Nack != "" {
			nacks = append(nacks, fmt.Sprintf("%s: version %s rejected: %s", k, orDash(ts.NackVersion), ts.Nack))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("proxystatus: writing detail: %w", err)
	}
	if len(nacks) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "NACKS:")
		for _, n := range nacks {
			if _, err := fmt.Fprintf(w, "  %s\n", n); err != nil {
				return fmt.Errorf("proxystatus: writing detail: %w", err)
			}
		}
	}
	return nil
}

// JSONDocument is the document WriteJSON writes (see the package doc).
type JSONDocument struct {
	Proxies []Record `json:"proxies"`
}

// WriteJSON writes recs, sorted, as a JSONDocument. A TypeStatus without a
// Status gets Compute's.
func WriteJSON(w io.Writer, recs []Record) error {
	doc := JSONDocument{Proxies: make([]Record, 0, len(recs))}
	for _, r := range sorted(recs) {
		r = r.Clone()
		for k, ts := range r.Types {
			if ts.Status == "" {
				ts.Status = ts.Compute()
				r.Types[k] = ts
			}
		}
		doc.Proxies = append(doc.Proxies, r)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("proxystatus: writing JSON: %w", err)
	}
	return nil
}
