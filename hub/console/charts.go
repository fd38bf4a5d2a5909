package console

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics the charts read.
const (
	convergenceMetric = "meshfed_xds_proxy_convergence_seconds"
	pushesMetric      = "meshfed_xds_pushes_total"
)

// pushSampleEvery is how often Run samples the push counter;
// pushSamplesKept samples cover the chart's ten minutes.
const (
	pushSampleEvery = 10 * time.Second
	pushMinutes     = 10
	pushSamplesKept = pushMinutes*int(time.Minute/pushSampleEvery) + 1
)

// chartSVG is an inline SVG chart, built by this package from numbers
// alone (no outside text reaches it unescaped).
type chartSVG = template.HTML

// bar is one bar of a chart.
type bar struct {
	Label string
	Value float64
}

// barChart draws bars as an inline SVG with a title and a description (for
// screen readers), each bar with its value as a tooltip and its label
// under it.
func barChart(title, unit string, bars []bar) chartSVG {
	const w, h, top, bottom, left = 480.0, 160.0, 16.0, 28.0, 8.0
	var maxV float64
	for _, b := range bars {
		maxV = math.Max(maxV, b.Value)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg class="chart" viewBox="0 0 %g %g" role="img" aria-labelledby="%s-t %s-d" xmlns="http://www.w3.org/2000/svg">`, w, h, idOf(title), idOf(title))
	fmt.Fprintf(&sb, `<title id="%s-t">%s</title>`, idOf(title), template.HTMLEscapeString(title))
	var desc []string
	for _, b := range bars {
		desc = append(desc, fmt.Sprintf("%s: %s", b.Label, formatValue(b.Value)))
	}
	fmt.Fprintf(&sb, `<desc id="%s-d">%s</desc>`, idOf(title), template.HTMLEscapeString(strings.Join(desc, ", ")))
	if len(bars) == 0 {
		fmt.Fprintf(&sb, `<text x="%g" y="%g" class="empty">no data yet</text></svg>`, w/2, h/2)
		return chartSVG(sb.String())
	}
	slot := (w - left) / float64(len(bars))
	// Labels that would overlap are thinned to every step-th bar (the
	// tooltip and the description keep them all): at 10 px a character is
	// about 6 px wide.
	widest := 0
	for _, b := range bars {
		widest = max(widest, utf8.RuneCountInString(b.Label))
	}
	step := max(1, int(math.Ceil(float64(widest)*6/slot)))
	for i, b := range bars {
		bh := 0.0
		if maxV > 0 {
			bh = (h - top - bottom) * b.Value / maxV
		}
		x := left + float64(i)*slot
		fmt.Fprintf(&sb, `<g><title>%s: %s %s</title><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`,
			template.HTMLEscapeString(b.Label), formatValue(b.Value), template.HTMLEscapeString(unit), x+1, h-bottom-bh, math.Max(slot-2, 1), bh)
		if b.Value > 0 {
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" class="value">%s</text>`, x+slot/2, h-bottom-bh-3, formatValue(b.Value))
		}
		if i%step == 0 {
			fmt.Fprintf(&sb, `<text x="%.1f" y="%.1f" class="label">%s</text>`, x+slot/2, h-bottom+14, template.HTMLEscapeString(b.Label))
		}
		sb.WriteString(`</g>`)
	}
	sb.WriteString(`</svg>`)
	return chartSVG(sb.String())
}

func idOf(title string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(title))
}

func formatValue(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// histogram is a Prometheus histogram summed over its label sets.
type histogram struct {
	// upper[i] is bucket i's upper bound; counts[i] its own count (not
	// cumulative); the last entry is +Inf.
	upper  []float64
	counts []float64
	sum    float64
	total  uint64
}

// convergenceHistogram reads the proxy convergence histogram.
func convergenceHistogram(g prometheus.Gatherer) histogram {
	var h histogram
	if g == nil {
		return h
	}
	mfs, err := g.Gather()
	if err != nil {
		return h
	}
	for _, mf := range mfs {
		if mf.GetName() != convergenceMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			ph := m.GetHistogram()
			if h.upper == nil {
				for _, b := range ph.GetBucket() {
					h.upper = append(h.upper, b.GetUpperBound())
				}
				h.upper = append(h.upper, math.Inf(1))
				h.counts = make([]float64, len(h.upper))
			}
			prev := uint64(0)
			for i, b := range ph.GetBucket() {
				if i < len(h.counts)-1 {
					h.counts[i] += float64(b.GetCumulativeCount() - prev)
				}
				prev = b.GetCumulativeCount()
			}
			h.counts[len(h.counts)-1] += float64(ph.GetSampleCount() - prev)
			h.sum += ph.GetSampleSum()
			h.total += ph.GetSampleCount()
		}
	}
	return h
}

// histogramSummary is what the overview says beside the chart.
type histogramSummary struct {
	Count uint64
	Mean  string
	P99   string
}

func (h histogram) summary() histogramSummary {
	s := histogramSummary{Count: h.total}
	if h.total == 0 {
		return s
	}
	s.Mean = formatSeconds(h.sum / float64(h.total))
	// The p99 is the upper bound of the bucket it falls in.
	want := math.Ceil(0.99 * float64(h.total))
	var acc float64
	for i, c := range h.counts {
		acc += c
		if acc >= want {
			s.P99 = "≤ " + formatSeconds(h.upper[i])
			break
		}
	}
	return s
}

func (h histogram) svg() chartSVG {
	var bars []bar
	if h.total > 0 {
		for i, c := range h.counts {
			bars = append(bars, bar{Label: "≤" + formatSeconds(h.upper[i]), Value: c})
		}
	}
	return barChart("Proxy convergence (send to ACK)", "ACKs", bars)
}

// formatSeconds is a short duration label: 500µs, 1ms, 16s, +Inf.
func formatSeconds(s float64) string {
	switch {
	case math.IsInf(s, 1):
		return "+Inf"
	case s < 0.001:
		return fmt.Sprintf("%.0fµs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%.3gms", s*1e3)
	}
	return fmt.Sprintf("%.3gs", s)
}

// counterTotal sums a counter over its label sets.
func counterTotal(g prometheus.Gatherer, name string) (float64, bool) {
	if g == nil {
		return 0, false
	}
	mfs, err := g.Gather()
	if err != nil {
		return 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var total float64
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
		return total, true
	}
	// Not registered yet (nothing pushed): zero.
	return 0, true
}

// pushSamples is a ring of counter samples, oldest first.
type pushSamples struct {
	at    []time.Time
	total []float64
}

func (p *pushSamples) add(at time.Time, total float64) {
	p.at = append(p.at, at)
	p.total = append(p.total, total)
	if n := len(p.at) - pushSamplesKept; n > 0 {
		p.at, p.total = p.at[n:], p.total[n:]
	}
}

// perMinute returns one bar per minute of the samples, oldest first: the
// pushes between a sample and the one a minute later (the newest minute
// may be partial; its label says how long it covers).
func (p *pushSamples) perMinute() pushRates { return pushRates(p.rates()) }

func (p *pushSamples) rates() []bar {
	per := int(time.Minute / pushSampleEvery)
	n := len(p.at)
	if n < 2 {
		return nil
	}
	var bars []bar
	// Walk back from the newest sample in steps of a minute.
	for end := n - 1; end > 0 && len(bars) < pushMinutes; end -= per {
		start := max(end-per, 0)
		d := p.at[end].Sub(p.at[start])
		label := fmt.Sprintf("-%dm", len(bars))
		if len(bars) == 0 {
			label = "now"
		}
		if d < time.Minute-pushSampleEvery/2 {
			label += fmt.Sprintf(" (%ds)", int(d.Seconds()))
		}
		bars = append(bars, bar{Label: label, Value: p.total[end] - p.total[start]})
	}
	for i, j := 0, len(bars)-1; i < j; i, j = i+1, j-1 {
		bars[i], bars[j] = bars[j], bars[i]
	}
	return bars
}

// pushRates are the bars of the pushes-per-minute chart.
type pushRates []bar

func (r pushRates) svg() chartSVG { return barChart("Pushes per minute", "pushes", r) }
