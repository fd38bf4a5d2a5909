package console

import (
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/meshfed/meshfed/pkg/model"
	"github.com/meshfed/meshfed/pkg/proxystatus"
)

// funcs are the templates' functions.
var funcs = template.FuncMap{
	// statusClass is the CSS class of a status (the text is always shown
	// too: colour is never the only sign).
	"statusClass": func(s any) string {
		v := strings.ToLower(strings.ReplaceAll(toString(s), " ", "-"))
		return "st st-" + v
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	},
	// ago is how long before now t was, for a reader in a hurry.
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return humanDuration(now.Sub(t)) + " ago"
	},
	"join":  strings.Join,
	"upper": strings.ToUpper,
	"dash": func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	},
	// locality is "region/zone/subzone", or "-" for none.
	"locality": func(l model.Locality) string {
		if l == (model.Locality{}) {
			return "-"
		}
		return l.String()
	},
	"short":     short,
	"proxyLink": proxyLink,
	"explainLink": func(proxy string) string {
		return "/ui/explain?proxy=" + template.URLQueryEscaper(proxy)
	},
	"add": func(a, b int) int { return a + b },
}

func toString(v any) string {
	switch s := v.(type) {
	case string:
		return s
	case proxystatus.Status:
		return string(s)
	case interface{ String() string }:
		return s.String()
	}
	return ""
}

// humanDuration rounds d to a readable unit: 45s, 12m, 3h, 5d.
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return strings.TrimSuffix(d.Round(time.Minute).String(), "0s")
	case d < 48*time.Hour:
		return strings.TrimSuffix(strings.TrimSuffix(d.Round(time.Hour).String(), "0s"), "0m")
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
}
