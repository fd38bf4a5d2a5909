package ca

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RetiringConfigMap keeps, in the config cluster, the roots that are
// retiring after a rotation and when each may go: the federated trust
// bundle lives in the replicas' memory, and a fleet restarted as a whole
// in the middle of a rotation must still trust an old root until the last
// leaf signed under it has expired. One data key per root fingerprint; the
// value is the JSON of a RetiringRoot. Roots are public: a ConfigMap, not
// a Secret.
const RetiringConfigMap = "meshfed-ca-retiring"

// RetiringRoot is a root that leaves the trust bundle at RetireAt.
type RetiringRoot struct {
	Fingerprint string    `json:"-"`
	PEM         []byte    `json:"pem"`
	RetireAt    time.Time `json:"retireAt"`
}

// Retirements reads and writes RetiringConfigMap in a namespace of the
// config cluster. It needs get, create and update on that ConfigMap.
type Retirements struct {
	Client    client.Client
	Namespace string
}

// Load returns the roots still retiring at now, sorted by fingerprint. A
// missing ConfigMap means none. An entry that does not parse is skipped
// and reported in the error, with the others returned.
func (r Retirements) Load(ctx context.Context, now time.Time) ([]RetiringRoot, error) {
	var cm corev1.ConfigMap
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: RetiringConfigMap}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("ca: reading %s/%s: %w", r.Namespace, RetiringConfigMap, err)
	}
	entries, errs := decodeRetiring(cm.Data)
	var out []RetiringRoot
	for _, fp := range slices.Sorted(maps.Keys(entries)) {
		if e := entries[fp]; now.Before(e.RetireAt) {
			out = append(out, e)
		}
	}
	return out, errors.Join(errs...)
}

// Save records roots as retiring, keeping for each root the later of its
// recorded and new RetireAt, and drops the entries past at now. Replicas
// saving at once all end recorded: conflicts are retried.
func (r Retirements) Save(ctx context.Context, roots []RetiringRoot, now time.Time) error {
	key := client.ObjectKey{Namespace: r.Namespace, Name: RetiringConfigMap}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cm corev1.ConfigMap
		err := r.Client.Get(ctx, key, &cm)
		create := apierrors.IsNotFound(err)
		if err != nil && !create {
			return err
		}
		entries, _ := decodeRetiring(cm.Data) // an entry that does not parse is replaced or dropped
		for _, root := range roots {
			if e, ok := entries[root.Fingerprint]; !ok || root.RetireAt.After(e.RetireAt) {
				entries[root.Fingerprint] = root
			}
		}
		data := map[string]string{}
		for fp, e := range entries {
			if !now.Before(e.RetireAt) {
				continue
			}
			raw, err := json.Marshal(RetiringRoot{PEM: e.PEM, RetireAt: e.RetireAt.UTC()})
			if err != nil {
				return err
			}
			data[fp] = string(raw)
		}
		if create {
			cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: RetiringConfigMap,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "meshfed-hub"}}, Data: data}
			if err := r.Client.Create(ctx, &cm); apierrors.IsAlreadyExists(err) {
				// Another replica created it first: read it and merge again.
				return apierrors.NewConflict(corev1.Resource("configmaps"), RetiringConfigMap, err)
			} else if err != nil {
				return err
			}
			return nil
		}
		cm.Data = data
		return r.Client.Update(ctx, &cm)
	})
	if err != nil {
		return fmt.Errorf("ca: writing %s/%s: %w", r.Namespace, RetiringConfigMap, err)
	}
	return nil
}

// decodeRetiring reads the entries of the ConfigMap's data.
func decodeRetiring(data map[string]string) (map[string]RetiringRoot, []error) {
	out := map[string]RetiringRoot{}
	var errs []error
	for fp, raw := range data {
		var e RetiringRoot
		if err := json.Unmarshal([]byte(raw), &e); err != nil || len(e.PEM) == 0 || e.RetireAt.IsZero() {
			errs = append(errs, fmt.Errorf("ca: %s entry %s: not a retiring root (%v)", RetiringConfigMap, fp, err))
			continue
		}
		e.Fingerprint = fp
		out[fp] = e
	}
	return out, errs
}
