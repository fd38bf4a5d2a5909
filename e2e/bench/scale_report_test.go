package bench

import (
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// scaleTable prints the results one row per control plane and, when istiod
// or a baseline ran, each meshfed row's ratios to it.
func scaleTable(cfg scaleConfig, results []ScaleResult) string {
	var sb strings.Builder
	subscribed := "eleven services each"
	if cfg.subscribeAll {
		subscribed = "every service each"
	}
	pods := "Pods"
	if cfg.noPods {
		pods = "no Pods"
	}
	fmt.Fprintf(&sb, "envelope: %d clusters x %d services x %d endpoints (%s) = %d endpoints, %d clients (subscribed to %s), %d changes\n",
		cfg.clusters, cfg.services, cfg.endpoints, pods, cfg.totalEndpoints(), cfg.clients, subscribed, cfg.changes)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"control plane"}
	for _, c := range scaleColumns {
		head = append(head, c.title)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t")+"\t")
	for _, r := range results {
		row := []string{r.Name}
		for _, c := range scaleColumns {
			row = append(row, fmt.Sprintf(c.format, c.value(r)))
		}
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	for _, ref := range results {
		if !strings.HasPrefix(ref.Name, "istiod") && !strings.HasPrefix(ref.Name, "baseline") {
			continue
		}
		for _, r := range results {
			if !strings.HasPrefix(r.Name, "meshfed") {
				continue
			}
			row := []string{r.Name + " / " + ref.Name}
			for _, c := range scaleColumns {
				row = append(row, ratio(c.value(r), c.value(ref)))
			}
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
	}
	_ = tw.Flush()
	return sb.String()
}

// writeScaleOutputs writes the table (scale.txt), the results as JSON
// (scale.json) and a bar chart of them (scale.svg) into dir.
func writeScaleOutputs(dir string, cfg scaleConfig, results []ScaleResult, table string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	doc := ScaleReport{
		Date: time.Now().UTC().Format(time.DateOnly), Machine: ThisMachine(),
		Clusters: cfg.clusters, Services: cfg.services, Endpoints: cfg.endpoints, Total: cfg.totalEndpoints(),
		Clients: cfg.clients, Changes: cfg.changes, SubscribeAll: cfg.subscribeAll, Pods: !cfg.noPods,
		Results: results,
	}
	js, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"scale.json": append(js, '\n'),
		"scale.txt":  []byte(table),
		"scale.svg":  []byte(scaleSVG(cfg, results)),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// scaleSVG draws one group of horizontal bars per figure, a bar per control
// plane, each group scaled to its largest value (all figures are costs:
// shorter is better).
func scaleSVG(cfg scaleConfig, results []ScaleResult) string {
	const (
		width, labelW, barH, gap, top = 900, 300, 16, 28, 40
	)
	colors := []string{"#2b6cb0", "#38a169", "#d69e2e", "#c53030", "#6b46c1"}
	groupH := len(results)*barH + gap
	height := top + len(scaleColumns)*groupH + 20
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&sb, `<text x="10" y="20" font-size="14" font-weight="bold">%s</text>`+"\n",
		html.EscapeString(fmt.Sprintf("meshfed scale envelope: %d clusters, %d endpoints, %d clients (shorter is better)",
			cfg.clusters, cfg.totalEndpoints(), cfg.clients)))
	y := top
	for _, c := range scaleColumns {
		peak := 0.0
		for _, r := range results {
			peak = max(peak, c.value(r))
		}
		fmt.Fprintf(&sb, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+12, html.EscapeString(c.title))
		for i, r := range results {
			v := c.value(r)
			w := 0.0
			if peak > 0 {
				w = v / peak * float64(width-labelW-120)
			}
			by := y + 16 + i*barH
			fmt.Fprintf(&sb, `<text x="20" y="%d">%s</text>`, by+11, html.EscapeString(r.Name))
			fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, labelW, by, w, barH-3, colors[i%len(colors)])
			fmt.Fprintf(&sb, `<text x="%.1f" y="%d">%s</text>`+"\n", float64(labelW)+w+6, by+11, fmt.Sprintf(c.format, v))
		}
		y += groupH + 8
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}
