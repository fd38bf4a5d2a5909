package spoke

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// WebhookConfigs names the spoke's own webhook configurations, whose
// caBundle the spoke keeps equal to the CA of its serving certificate.
type WebhookConfigs struct {
	Mutating, Validating string
}

// caBundleKeeper patches the caBundle of the spoke's webhook
// configurations, at start and every interval, so that a re-installed chart
// or a rotated serving certificate never leaves the apiserver distrusting
// the webhooks.
type caBundleKeeper struct {
	client   kubernetes.Interface
	names    WebhookConfigs
	ca       func() ([]byte, error)
	interval time.Duration
	clock    clock.WithTicker
	log      logr.Logger
	patches  *prometheus.CounterVec
}

func newCABundleKeeper(c kubernetes.Interface, names WebhookConfigs, ca func() ([]byte, error), interval time.Duration, clk clock.WithTicker, log logr.Logger, reg prometheus.Registerer) *caBundleKeeper {
	k := &caBundleKeeper{
		client: c, names: names, ca: ca, interval: interval, clock: clk, log: log,
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshfed_spoke_cabundle_patches_total",
			Help: "Patches of the spoke's webhook configurations' caBundle, by result.",
		}, []string{"result"}),
	}
	reg.MustRegister(k.patches)
	return k
}

// Run keeps the caBundles current until ctx ends. Errors are logged,
// counted and retried at the next interval: the webhooks keep serving.
func (k *caBundleKeeper) Run(ctx context.Context) error {
	t := k.clock.NewTicker(k.interval)
	defer t.Stop()
	for {
		if err := k.syncOnce(ctx); err != nil && ctx.Err() == nil {
			k.patches.WithLabelValues("error").Inc()
			k.log.Error(err, "keeping the webhook caBundle current")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

func (k *caBundleKeeper) syncOnce(ctx context.Context) error {
	ca, err := k.ca()
	if err != nil {
		return err
	}
	arv1 := k.client.AdmissionregistrationV1()
	if name := k.names.Mutating; name != "" {
		cfg, err := arv1.MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("mutating webhook configuration %s: %w", name, err)
		}
		var current [][]byte
		for _, w := range cfg.Webhooks {
			current = append(current, w.ClientConfig.CABundle)
		}
		if patch := caBundlePatch(current, ca); patch != nil {
			if _, err := arv1.MutatingWebhookConfigurations().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("patching %s: %w", name, err)
			}
			k.patches.WithLabelValues("patched").Inc()
			k.log.Info("webhook caBundle updated", "configuration", name)
		}
	}
	if name := k.names.Validating; name != "" {
		cfg, err := arv1.ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("validating webhook configuration %s: %w", name, err)
		}
		var current [][]byte
		for _, w := range cfg.Webhooks {
			current = append(current, w.ClientConfig.CABundle)
		}
		if patch := caBundlePatch(current, ca); patch != nil {
			if _, err := arv1.ValidatingWebhookConfigurations().Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("patching %s: %w", name, err)
			}
			k.patches.WithLabelValues("patched").Inc()
			k.log.Info("webhook caBundle updated", "configuration", name)
		}
	}
	return nil
}

// caBundlePatch returns a JSON patch setting every webhook's caBundle to
// ca, or nil when they all hold it already. It is pure.
func caBundlePatch(current [][]byte, ca []byte) []byte {
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value []byte `json:"value"`
	}
	var ops []op
	for i, b := range current {
		if !bytes.Equal(b, ca) {
			ops = append(ops, op{Op: "add", Path: fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i), Value: ca})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	out, _ := json.Marshal(ops)
	return out
}

// fileCA reads the caBundle from a file on every call, so a rotated CA
// file (a mounted Secret) is picked up.
func fileCA(path string) func() ([]byte, error) {
	return func() ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("caBundle file: %w", err)
		}
		return b, nil
	}
}
