package controller

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/strategy"
)

// TestStatusByOthers: the watch of Releases passes a status change that
// the operator did not write (a wipe, an older status restored, a status
// written on a Release re-created under the same name) and none it wrote
// itself, recognised by its content (also when its event comes before the
// write returns) or by the resourceVersion the write made; a change of the
// metadata only passes nothing.
func TestStatusByOthers(t *testing.T) {
	rel := func(uid, rv string, s strategy.State) *v1alpha1.Release {
		return &v1alpha1.Release{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID(uid), ResourceVersion: rv},
			Status: v1alpha1.ReleaseStatus{ObservedGeneration: 2, Rollout: s}}
	}
	older := strategy.NewState("v1", "v2")
	mine := older
	mine.Phase, mine.Desired.Weight = strategy.PhaseProgressing, 25
	// What the API server hands back of a write: the same status, decoded.
	stored := func(r *v1alpha1.Release, rv string) *v1alpha1.Release {
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var out v1alpha1.Release
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatal(err)
		}
		out.ResourceVersion = rv
		return &out
	}
	var own ownStatus
	written := rel("u1", "10", mine)
	own.wrote(written, &written.Status)
	wiped := rel("u1", "12", strategy.State{})
	wiped.Status = v1alpha1.ReleaseStatus{}
	labelled := stored(written, "13")
	labelled.Labels = map[string]string{"team": "shop"}
	pruned := stored(written, "11")
	pruned.Status.Rollout.Message = "" // as if the schema pruned a field
	recreated := stored(written, "14")
	recreated.UID = "u2"

	p := own.statusByOthers()
	got := map[string]bool{}
	for _, tc := range []struct {
		name       string
		prev, next *v1alpha1.Release
		store      bool // the write returned before the event
	}{
		{"its own write, the event before the write returned", rel("u1", "9", older), stored(written, "11"), false},
		{"its own write, stored with another content", rel("u1", "9", older), pruned, true},
		{"a wipe", stored(written, "11"), wiped, false},
		{"an older status restored", stored(written, "11"), rel("u1", "12", older), false},
		{"the metadata only", stored(written, "11"), labelled, false},
		{"a Release re-created under the same name", rel("u2", "13", older), recreated, false},
	} {
		if tc.store {
			s := stored(written, "11")
			own.stored(s)
		}
		got[tc.name] = p.Update(event.UpdateEvent{ObjectOld: tc.prev, ObjectNew: tc.next})
	}
	want := map[string]bool{
		"its own write, the event before the write returned": false,
		"its own write, stored with another content":         false,
		"a wipe":                   true,
		"an older status restored": true,
		"the metadata only":        false,
		"a Release re-created under the same name": true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("passed (-want +got):\n%s", diff)
	}
	own.forget(client.ObjectKeyFromObject(written))
	if own.own(stored(written, "11")) {
		t.Error("a forgotten Release's write is still its own")
	}
}
