package framework

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestWorkloadPodLabels: a workload's Pods carry its PodLabels (and
// app=<service>), replicas added later too, and SetPodLabels relabels the
// running Pods while keeping labels others wrote.
func TestWorkloadPodLabels(t *testing.T) {
	f := NewTestFleet(t, FleetOptions{Remotes: Remotes(1), HubBinary: "never-started"})
	ctx := t.Context()
	r := f.Remotes()[0]
	if _, err := r.DeployWorkload(ctx, WorkloadOptions{Service: "bad", PodLabels: map[string]string{"app": "other"}}); err == nil {
		t.Errorf("PodLabels overriding app accepted")
	}
	w, err := r.DeployWorkload(ctx, WorkloadOptions{Namespace: "demo", Service: "echo", Replicas: 1,
		PodLabels: map[string]string{"version": "v1", "track": "stable"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Scale(ctx, 2); err != nil {
		t.Fatal(err)
	}
	check := func(want map[string]string, absent ...string) {
		t.Helper()
		for _, rep := range w.Replicas() {
			var pod corev1.Pod
			if err := r.Client().Get(ctx, client.ObjectKey{Namespace: "demo", Name: rep.Pod}, &pod); err != nil {
				t.Fatal(err)
			}
			for k, v := range want {
				if got, ok := pod.Labels[k]; !ok || got != v {
					t.Errorf("pod %s: label %s=%q, want %q (labels %v)", rep.Pod, k, got, v, pod.Labels)
				}
			}
			for _, k := range absent {
				if _, ok := pod.Labels[k]; ok {
					t.Errorf("pod %s still has label %s", rep.Pod, k)
				}
			}
		}
	}
	check(map[string]string{"app": "echo", "version": "v1", "track": "stable"})

	// The apiserver's own labels (Node topology) survive a relabel.
	var before corev1.Pod
	if err := r.Client().Get(ctx, client.ObjectKey{Namespace: "demo", Name: w.Replicas()[0].Pod}, &before); err != nil {
		t.Fatal(err)
	}
	if err := w.SetPodLabels(ctx, map[string]string{"version": "v2"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"app": "echo", "version": "v2"}
	for k, v := range before.Labels {
		if _, ours := map[string]bool{"app": true, "version": true, "track": true}[k]; !ours {
			want[k] = v
		}
	}
	check(want, "track")
	if got := w.Options().PodLabels; !maps.Equal(got, map[string]string{"version": "v2"}) {
		t.Errorf("Options().PodLabels = %v", got)
	}
}
