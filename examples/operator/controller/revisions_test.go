package controller

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

func spec(revision, template string) *v1alpha1.ReleaseSpec {
	return &v1alpha1.ReleaseSpec{Revision: revision, Image: v1alpha1.ImageTemplate{Container: "app", Template: template}}
}

// TestMeaning: a revision's identity is its name and the digest of the
// image it renders; editing the image template makes another identity of
// the same name.
func TestMeaning(t *testing.T) {
	old := meaning(spec("v2", "registry.example/shop:{revision}"))
	want := v1alpha1.RevisionImage{Identity: "v2@18fcb157", Container: "app", Image: "registry.example/shop:v2"}
	if d := cmp.Diff(want, old); d != "" {
		t.Errorf("meaning (-want +got):\n%s", d)
	}
	edited := meaning(spec("v2", "mirror.example/shop:{revision}"))
	if name, _ := replicas.SplitIdentity(edited.Identity); name != "v2" || edited.Identity == old.Identity || edited.Image != "mirror.example/shop:v2" {
		t.Errorf("edited template: %+v, was %+v", edited, old)
	}
}

// TestKeptRecords: the status keeps what the identities the rollout names
// mean, and the spec's own, in a fixed order; the others are dropped.
func TestKeptRecords(t *testing.T) {
	rec := func(id string) v1alpha1.RevisionImage {
		return v1alpha1.RevisionImage{Identity: id, Container: "app", Image: "x:" + id}
	}
	current := rec("v3@cccccccc")
	records := known([]v1alpha1.RevisionImage{rec("v9@99999999"), rec("v2@bbbbbbbb"), rec("v1@aaaaaaaa"), rec("v3@cccccccc")}, current)
	s := strategy.State{StableRevision: "v1@aaaaaaaa", CanaryRevision: "v2@bbbbbbbb", PendingRevision: "v3@cccccccc"}
	want := []v1alpha1.RevisionImage{current, rec("v1@aaaaaaaa"), rec("v2@bbbbbbbb")}
	if d := cmp.Diff(want, kept(records, current, &s)); d != "" {
		t.Errorf("kept (-want +got):\n%s", d)
	}
	done := strategy.State{StableRevision: "v3@cccccccc", CanaryRevision: "v3@cccccccc", Desired: strategy.Allocation{CanaryRevision: "v1@aaaaaaaa"}}
	want = []v1alpha1.RevisionImage{current, rec("v1@aaaaaaaa")}
	if d := cmp.Diff(want, kept(records, current, &done)); d != "" {
		t.Errorf("kept after success (-want +got):\n%s", d)
	}
}

// TestTemplateFunc: the Deployers' TemplateFunc sets the image recorded
// for an identity, the spec's template for a bare name (a status from
// before identities) and for an identity with no record that the template
// renders (a wiped status, whose records are gone), and fails for any
// other identity with no record.
func TestTemplateFunc(t *testing.T) {
	var m meanings
	m.set([]v1alpha1.RevisionImage{{Identity: "v1@aaaaaaaa", Container: "app", Image: "old.example/app:v1"}})
	f := m.template(v1alpha1.ImageTemplate{Container: "app", Template: "new.example/app:{revision}"})
	for _, tc := range []struct{ identity, image, err string }{
		{"v1@aaaaaaaa", "old.example/app:v1", ""},
		{"v1", "new.example/app:v1", ""},
		{"v2@bbbbbbbb", "", `revision "v2@bbbbbbbb": status.revisions does not record its image`},
		{replicas.Identity("v3", rendered("app", "new.example/app:v3")), "new.example/app:v3", ""},
	} {
		tmpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "none"}}}}
		err := f(tc.identity, &tmpl)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.identity, err, tc.err)
		case tc.err == "" && (err != nil || tmpl.Spec.Containers[0].Image != tc.image):
			t.Errorf("%s: image %q, error %v; want %q", tc.identity, tmpl.Spec.Containers[0].Image, err, tc.image)
		}
	}
}
