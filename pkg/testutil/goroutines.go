package testutil

import (
	"fmt"
	"runtime"
	"sort"
	"strings"
)

// Goroutines counts the live goroutines of the process by where they run
// and who started them, so that a leak check can name what grew instead of
// printing two totals.
type Goroutines map[string]int

// CountGoroutines takes a census of every live goroutine but the caller's.
// The key of a goroutine is its innermost function and the function that
// created it.
func CountGoroutines() Goroutines {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	g := Goroutines{}
	for i, block := range strings.Split(string(buf), "\n\n") {
		if i == 0 {
			continue // the caller's own goroutine comes first
		}
		g[goroutineKey(block)]++
	}
	return g
}

// goroutineKey names one goroutine of a runtime.Stack dump: its innermost
// function (the first line after the header, without arguments) and its
// "created by" line.
func goroutineKey(block string) string {
	lines := strings.Split(strings.TrimSpace(block), "\n")
	top, creator := "?", "?"
	if len(lines) > 1 {
		top = lines[1]
		if i := strings.LastIndexByte(top, '('); i > 0 {
			top = top[:i]
		}
	}
	for _, l := range lines {
		if rest, ok := strings.CutPrefix(l, "created by "); ok {
			if i := strings.Index(rest, " in goroutine"); i > 0 {
				rest = rest[:i]
			}
			creator = rest
		}
	}
	return top + " <- " + creator
}

// Total is the number of goroutines counted.
func (g Goroutines) Total() int {
	n := 0
	for _, c := range g {
		n += c
	}
	return n
}

// GrownSince lists, one per line and sorted, the kinds of goroutine of
// which there are more now than in before, with both counts.
func (g Goroutines) GrownSince(before Goroutines) string {
	var out []string
	for k, n := range g {
		if n > before[k] {
			out = append(out, fmt.Sprintf("%d -> %d  %s", before[k], n, k))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// Except leaves out the goroutines whose key contains any of substrs: for
// process-wide pools, such as net/http's idle connections, which outlive
// the component under test by design and expire on their own.
func (g Goroutines) Except(substrs ...string) Goroutines {
	out := Goroutines{}
	for k, n := range g {
		keep := true
		for _, s := range substrs {
			if strings.Contains(k, s) {
				keep = false
				break
			}
		}
		if keep {
			out[k] = n
		}
	}
	return out
}
