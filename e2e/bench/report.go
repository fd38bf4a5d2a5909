package bench

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// ScaleResult is one control plane's row of the envelope table
// (BenchmarkScale), as scale.json keeps it.
type ScaleResult struct {
	Name     string `json:"name"`
	Replicas int    `json:"replicas"`
	// SyncS is from the remote secrets applied until a client subscribed to
	// every service holds every endpoint; SyncCPUS the control plane's CPU
	// over it (all replicas).
	SyncS    float64 `json:"syncS"`
	SyncCPUS float64 `json:"syncCPUS"`
	// HeapMiB and RSSMiB after sync (heap after a forced GC), summed over
	// replicas; HeapBPerEndpoint divides the heap by the fleet's endpoints.
	HeapMiB          float64 `json:"heapMiB"`
	RSSMiB           float64 `json:"rssMiB"`
	HeapBPerEndpoint float64 `json:"heapBytesPerEndpoint"`
	RSSBPerEndpoint  float64 `json:"rssBytesPerEndpoint"`
	// ConnectS and ConnectCPUS: every client connected and holding its
	// assignments, and the CPU it took.
	ConnectS    float64 `json:"connectS"`
	ConnectCPUS float64 `json:"connectCPUS"`
	// ClientsHeapMiB is the heap with every client connected: the
	// proxies' streams and their groups' assignments on top of HeapMiB.
	ClientsHeapMiB float64 `json:"clientsHeapMiB"`
	// ConnectRetries and StormRetries count the streams refused (or
	// failed) and redialled while connecting and during the storm.
	ConnectRetries int `json:"connectRetries"`
	StormRetries   int `json:"stormRetries"`
	// ChangeP50Ms and ChangeP99Ms: an EndpointSlice write until the last
	// client has the change; FirstP50Ms until the first has it.
	ChangeP50Ms float64 `json:"changeP50Ms"`
	ChangeP99Ms float64 `json:"changeP99Ms"`
	FirstP50Ms  float64 `json:"firstP50Ms"`
	// CPUPer100Changes is the control plane's CPU seconds per 100 changes
	// with every client connected.
	CPUPer100Changes float64 `json:"cpuSPer100Changes"`
	// IdleCPUMsPerS is the control plane's CPU, in ms a second, with every
	// client connected and nothing changing (-scale.idle after the
	// changes): what its timers and keepalives cost.
	IdleCPUMsPerS float64 `json:"idleCPUMsPerS"`
	// ReadsPerUpdate and WritesPerUpdate are the control plane's read and
	// write system calls per change and client (one proxy update): what
	// its transport costs beyond the response itself and its ACK.
	ReadsPerUpdate  float64 `json:"readsPerUpdate"`
	WritesPerUpdate float64 `json:"writesPerUpdate"`
	// StormS: every client dropped and redialled at once, until all hold
	// their assignments again; StormPeakHeapRatio the peak heap during it
	// over the steady heap before it (both the live heap, see liveHeapOf).
	StormS             float64 `json:"stormS"`
	StormPeakHeapRatio float64 `json:"stormPeakHeapRatio"`
	StormPeakRSSRatio  float64 `json:"stormPeakRSSRatio"`
	// StormCPUS is the control plane's CPU during the storm,
	// StormClientsCPUS the bench process's own: the clients dialling and
	// decoding every assignment, on the same cores as the control plane.
	StormCPUS        float64 `json:"stormCPUS"`
	StormClientsCPUS float64 `json:"stormClientsCPUS"`
}

// scaleColumn is one figure of the envelope table and chart.
type scaleColumn struct {
	title  string
	format string
	value  func(ScaleResult) float64
}

var scaleColumns = []scaleColumn{
	{"sync s", "%.2f", func(r ScaleResult) float64 { return r.SyncS }},
	{"sync CPU s", "%.2f", func(r ScaleResult) float64 { return r.SyncCPUS }},
	{"heap MiB", "%.1f", func(r ScaleResult) float64 { return r.HeapMiB }},
	{"heap B/endpoint", "%.0f", func(r ScaleResult) float64 { return r.HeapBPerEndpoint }},
	{"RSS MiB", "%.1f", func(r ScaleResult) float64 { return r.RSSMiB }},
	{"RSS B/endpoint", "%.0f", func(r ScaleResult) float64 { return r.RSSBPerEndpoint }},
	{"connect s", "%.2f", func(r ScaleResult) float64 { return r.ConnectS }},
	{"connect CPU s", "%.2f", func(r ScaleResult) float64 { return r.ConnectCPUS }},
	{"heap w/ clients MiB", "%.1f", func(r ScaleResult) float64 { return r.ClientsHeapMiB }},
	{"change p50 ms", "%.1f", func(r ScaleResult) float64 { return r.ChangeP50Ms }},
	{"change p99 ms", "%.1f", func(r ScaleResult) float64 { return r.ChangeP99Ms }},
	{"CPU s/100 changes", "%.2f", func(r ScaleResult) float64 { return r.CPUPer100Changes }},
	{"idle CPU ms/s", "%.1f", func(r ScaleResult) float64 { return r.IdleCPUMsPerS }},
	{"syscalls/update", "%.2f", func(r ScaleResult) float64 { return r.ReadsPerUpdate + r.WritesPerUpdate }},
	{"storm s", "%.2f", func(r ScaleResult) float64 { return r.StormS }},
	{"storm CPU s", "%.2f", func(r ScaleResult) float64 { return r.StormCPUS }},
	{"storm clients CPU s", "%.2f", func(r ScaleResult) float64 { return r.StormClientsCPUS }},
	{"storm peak heap x", "%.2f", func(r ScaleResult) float64 { return r.StormPeakHeapRatio }},
}

// ScaleReport is what `make bench-scale` records in scale.json: the
// envelope, where and when it ran, and one result per control plane. The
// scale page of the docs is rendered from the last one committed
// (docs/reference/scale.json, see Markdown).
type ScaleReport struct {
	// Date is the day the run ended (YYYY-MM-DD, UTC).
	Date string `json:"date"`
	// Machine is where it ran.
	Machine   Machine `json:"machine"`
	Clusters  int     `json:"clusters"`
	Services  int     `json:"servicesPerCluster"`
	Endpoints int     `json:"endpointsPerService"`
	Total     int     `json:"endpoints"`
	Clients   int     `json:"clients"`
	Changes   int     `json:"changes"`
	// SubscribeAll: every client subscribed to every service (as an Envoy
	// sidecar without a Sidecar scope), else to eleven each.
	SubscribeAll bool `json:"subscribeAll"`
	// Pods: every endpoint is a Pod the control plane watches.
	Pods    bool          `json:"pods"`
	Results []ScaleResult `json:"results"`
}

// Machine describes the machine a benchmark ran on.
type Machine struct {
	CPUs      int     `json:"cpus"`
	CPUModel  string  `json:"cpuModel,omitempty"`
	MemoryGiB float64 `json:"memoryGiB,omitempty"`
	Kernel    string  `json:"kernel,omitempty"`
	GoVersion string  `json:"goVersion"`
	// Version is the meshfed build measured (MESHFED_VERSION), when known.
	Version string `json:"version,omitempty"`
}

// ThisMachine describes the machine this process runs on, from /proc where
// it has one.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Version: os.Getenv("MESHFED_VERSION")}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					if kib, err := strconv.ParseFloat(f[0], 64); err == nil {
						m.MemoryGiB = float64(int(kib/1024/1024*10+0.5)) / 10
					}
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// Markdown renders the report as the scale page of the docs: the run, then
// one row per figure and one column per control plane, then each meshfed
// result's ratio to istiod's.
func (r ScaleReport) Markdown() []byte {
	var b bytes.Buffer
	b.WriteString("# Scale envelope: the last run\n\n")
	b.WriteString("<!-- Generated by `make bench-scale` (scale.json) and `make docs` (e2e/bench/report.go); do not edit. -->\n\n")
	subscribed := "eleven services each"
	if r.SubscribeAll {
		subscribed = "every service each"
	}
	pods := "each a Pod"
	if !r.Pods {
		pods = "no Pods"
	}
	fmt.Fprintf(&b, "%d remote clusters × %d services × %d endpoints (%s) = %d endpoints; %d ADS clients subscribed to %s; %d EndpointSlice changes.\n\n",
		r.Clusters, r.Services, r.Endpoints, pods, r.Total, r.Clients, subscribed, r.Changes)
	m := r.Machine
	fmt.Fprintf(&b, "Run on %s: %d CPUs", r.Date, m.CPUs)
	if m.CPUModel != "" {
		fmt.Fprintf(&b, " (%s)", m.CPUModel)
	}
	if m.MemoryGiB > 0 {
		fmt.Fprintf(&b, ", %.1f GiB", m.MemoryGiB)
	}
	if m.Kernel != "" {
		fmt.Fprintf(&b, ", Linux %s", m.Kernel)
	}
	fmt.Fprintf(&b, ", %s", m.GoVersion)
	if m.Version != "" {
		fmt.Fprintf(&b, ", meshfed %s", m.Version)
	}
	b.WriteString(". The same machine ran every apiserver and etcd of the fleet and the clients, each control plane in turn on the same objects; [Scale and footprint](../scale.md) says what each figure measures.\n\n")
	b.WriteString("| figure |")
	for _, res := range r.Results {
		fmt.Fprintf(&b, " %s |", res.Name)
	}
	var ref *ScaleResult
	for i := range r.Results {
		if strings.HasPrefix(r.Results[i].Name, "istiod") {
			ref = &r.Results[i]
		}
	}
	var meshfed []ScaleResult
	for _, res := range r.Results {
		if ref != nil && strings.HasPrefix(res.Name, "meshfed") {
			meshfed = append(meshfed, res)
			fmt.Fprintf(&b, " %s / istiod |", res.Name)
		}
	}
	b.WriteString("\n|---|")
	for range len(r.Results) + len(meshfed) {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, c := range scaleColumns {
		fmt.Fprintf(&b, "| %s |", c.title)
		for _, res := range r.Results {
			fmt.Fprintf(&b, " "+c.format+" |", c.value(res))
		}
		for _, res := range meshfed {
			fmt.Fprintf(&b, " %s |", ratio(c.value(res), c.value(*ref)))
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}
