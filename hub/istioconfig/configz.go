package istioconfig

import (
	"cmp"
	"slices"

	"github.com/meshfed/meshfed/pkg/debugdoc"
	"github.com/meshfed/meshfed/pkg/istioconfig"
	"github.com/meshfed/meshfed/pkg/istioconfig/validate"
)

// Configz returns the /debug/configz document.
func (w *Watcher) Configz() debugdoc.Configz {
	w.mu.Lock()
	doc := debugdoc.Configz{Synced: w.synced, Generation: w.gen, Objects: make([]debugdoc.ConfigzObject, 0, len(w.entries)),
		AbsentKinds: slices.Sorted(slices.Values(w.absent))}
	for k, e := range w.entries {
		o := configzObject(k, e, w.lost[k])
		o.Warnings = w.warningsLocked(k)
		doc.Objects = append(doc.Objects, o)
	}
	w.mu.Unlock()
	slices.SortFunc(doc.Objects, func(a, b debugdoc.ConfigzObject) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return doc
}

func configzObject(k istioconfig.Key, e *entry, lost []istioconfig.Shadowed) debugdoc.ConfigzObject {
	o := debugdoc.ConfigzObject{
		Kind: k.Kind, Namespace: k.Namespace, Name: k.Name,
		Generation: e.meta.Generation, State: e.state(lost), Reason: e.reason,
		Errors: configzErrors(e.errs), Notes: e.notes,
	}
	for _, s := range lost {
		o.ShadowedBy = append(o.ShadowedBy, debugdoc.ConfigzShadow{Host: s.Host, By: debugdoc.ConfigzKey(s.By)})
	}
	return o
}

func configzErrors(errs validate.ErrorList) []debugdoc.ConfigzError {
	var out []debugdoc.ConfigzError
	for _, e := range errs {
		out = append(out, debugdoc.ConfigzError{Field: e.Field, Detail: e.Detail})
	}
	return out
}
