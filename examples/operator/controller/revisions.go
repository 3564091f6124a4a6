package controller

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/upshift-dev/upshift/examples/operator/api/v1alpha1"
	"github.com/upshift-dev/upshift/serve/replicas"
	"github.com/upshift-dev/upshift/strategy"
)

// Revision identities. What a revision runs is spec.image rendered for
// spec.revision, so the same revision name means another image once
// spec.image.template changes. The rollout is given identities instead
// of names (replicas.Identity: "v2@18fcb157", the name and a digest of
// the rendered template): an edit of the template is a new identity, which
// the strategy rolls out as any new revision (a Retarget mid-rollout walks
// the abandoned canary back, then deploys the new identity at zero and
// ramps). The status keeps, in status.revisions, the image of every
// identity the rollout still names, so that the Deployers recognise (and
// could deploy) the stable side's identity by the image it was made from,
// not by the spec's current template.

// meaning returns the identity of the spec's revision and what it runs.
func meaning(spec *v1alpha1.ReleaseSpec) v1alpha1.RevisionImage {
	image := strings.ReplaceAll(spec.Image.Template, "{revision}", spec.Revision)
	return v1alpha1.RevisionImage{
		Identity:  replicas.Identity(spec.Revision, rendered(spec.Image.Container, image)),
		Container: spec.Image.Container,
		Image:     image,
	}
}

// rendered is the pod template an identity's digest is taken of: the
// container and its image, all the operator sets.
func rendered(container, image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: image}}}}
}

// meanings is what the revision identities known to one Release mean, as
// of its last reconcile: the TemplateFunc of its Deployers reads it.
// Safe for concurrent use; the zero value knows nothing.
type meanings struct {
	mu    sync.Mutex
	known map[string]v1alpha1.RevisionImage
}

// set replaces what is known with records.
func (m *meanings) set(records []v1alpha1.RevisionImage) {
	known := make(map[string]v1alpha1.RevisionImage, len(records))
	for _, r := range records {
		known[r.Identity] = r
	}
	m.mu.Lock()
	m.known = known
	m.mu.Unlock()
}

func (m *meanings) get(identity string) (v1alpha1.RevisionImage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.known[identity]
	return r, ok
}

// template is the TemplateFunc of a Release's Deployers: it sets the
// image that identity means. A bare revision name (a status written before
// identities) means the spec's image template rendered for it, as it did
// then. An identity with no record means the spec's image template
// rendered for its name when that gives the same identity (a wiped status
// loses status.revisions, and the side's revision annotation names an
// identity the template still renders); any other is an error: nothing
// says what it runs, so no side is recognised running it and none is
// deployed with it.
func (m *meanings) template(spec v1alpha1.ImageTemplate) replicas.TemplateFunc {
	return func(identity string, t *corev1.PodTemplateSpec) error {
		r, ok := m.get(identity)
		if !ok {
			name, digest := replicas.SplitIdentity(identity)
			r = v1alpha1.RevisionImage{Container: spec.Container, Image: strings.ReplaceAll(spec.Template, "{revision}", name)}
			if digest != "" && replicas.Identity(name, rendered(r.Container, r.Image)) != identity {
				return fmt.Errorf("revision %q: status.revisions does not record its image", identity)
			}
		}
		return replicas.Image(r.Container, func(string) string { return r.Image })(identity, t)
	}
}

// known is what a reconcile knows the identities mean: the records of the
// status and the spec's own identity (which wins: it is rendered now).
func known(records []v1alpha1.RevisionImage, current v1alpha1.RevisionImage) []v1alpha1.RevisionImage {
	out := make([]v1alpha1.RevisionImage, 0, len(records)+1)
	for _, r := range records {
		if r.Identity != current.Identity {
			out = append(out, r)
		}
	}
	return append(out, current)
}

// kept returns the records the status keeps after a reconcile that left
// the rollout in s: those of the identities s names (the stable, canary,
// pending and desired canary revisions), which a side may run or be
// deployed with, and the spec's own; in a fixed order (the spec's first,
// then by identity), so that an unchanged set is an unchanged status.
func kept(records []v1alpha1.RevisionImage, current v1alpha1.RevisionImage, s *strategy.State) []v1alpha1.RevisionImage {
	named := []string{s.StableRevision, s.CanaryRevision, s.PendingRevision, s.Desired.CanaryRevision}
	out := []v1alpha1.RevisionImage{current}
	for _, r := range records {
		if r.Identity != current.Identity && slices.Contains(named, r.Identity) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out[1:], func(a, b v1alpha1.RevisionImage) int { return strings.Compare(a.Identity, b.Identity) })
	return out
}

// recordRetarget records a Normal Event (reason Retarget) when the spec's
// revision identity is one the rollout in the status does not name yet, so
// that the next step retargets it: what the spec asks for, and what each
// side is observed running against what its role expects. When the
// identity keeps a revision name the rollout already names, the spec's
// image template changed what that revision means, and the Event says so.
func (r *Reconciler) recordRetarget(rel *v1alpha1.Release, current v1alpha1.RevisionImage) {
	s := &rel.Status.Rollout
	if s.StableRevision == "" || current.Identity == s.StableRevision || current.Identity == s.CanaryRevision ||
		current.Identity == s.PendingRevision {
		return
	}
	name, _ := replicas.SplitIdentity(current.Identity)
	note := fmt.Sprintf("spec asks for %s (image %s)", current.Identity, current.Image)
	for _, old := range []string{s.CanaryRevision, s.StableRevision} {
		if n, _ := replicas.SplitIdentity(old); n == name && old != current.Identity {
			note = fmt.Sprintf("spec.image.template changed what %s means: %s, was %s", name, note, old)
			break
		}
	}
	r.Recorder.Eventf(rel, nil, corev1.EventTypeNormal, "Retarget", "Retarget", "%s; %s", note, sidesNote(s))
}

// sidesNote says what each side of s is observed running and what its
// role expects.
func sidesNote(s *strategy.State) string {
	stable := s.StableSide
	if stable == "" {
		stable = strategy.SideA
	}
	runs := func(o strategy.SideObservation) string {
		switch {
		case !s.Observed.Revisions:
			return "not observed yet"
		case o.Revision == "":
			return "no revision it recognises"
		}
		return o.Revision
	}
	return fmt.Sprintf("stable side %s runs %s (expected %s), canary side %s runs %s (expected %s)",
		stable, runs(s.Observed.Stable), s.StableRevision, stable.Other(), runs(s.Observed.Canary), s.CanaryRevision)
}
