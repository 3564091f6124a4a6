package replicas

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/upshift-dev/upshift/rollout"
)

// RevisionAnnotation holds the revision a Deployer last deployed, on the
// workload's metadata and on its pod template (so that every pod carries
// the revision it was deployed as, and every revision is a template of its
// own to the workload's controller). It is a hint, never the proof:
// Deployer.Revision reports the revision the live template runs, which
// another writer may have changed since (a GitOps tool putting the old
// image back, kubectl set image) while leaving the annotation in place.
// The workload of the first revision needs no annotation: Deployer.Revision
// recognises it by its template.
const RevisionAnnotation = "upshift.dev/revision"

// TemplateFunc changes a pod template so that it runs revision: typically
// it sets a container's image (see Image), and may set environment
// variables, a config volume or labels. It is called on the template as
// read from the API server, and again on a fresh read after a write
// conflict. An error makes Deploy fail, marked rollout.Permanent: the
// revision cannot be mapped to a workload change.
//
// It is also what recognises a revision: the Deployer applies it to a copy
// of the live template, and the workload runs revision when that changes
// nothing the API server would keep (see Deployer.Revision). So it must
// set, not add: applied to a template that already runs revision it leaves
// it as it is (it sets an image or an environment variable, never appends
// one more), and it depends only on revision and on what it does not set.
// What distinguishes one revision from another must be set to a value
// other than the zero value of its field (an image, a non-empty variable):
// a field left at its zero value counts as unset, whatever the API server
// defaulted it to. When what a revision means can change under its name (an
// image template in an operator's spec), give the Runner identities
// (Identity: the name and a digest of the rendered template) and map each
// to its own template.
type TemplateFunc func(revision string, t *corev1.PodTemplateSpec) error

// Image returns a TemplateFunc that sets the image of the container named
// container (in spec.containers) to image(revision). It fails, naming the
// field, when no container has that name, image is nil or returns "".
func Image(container string, image func(revision string) string) TemplateFunc {
	return func(revision string, t *corev1.PodTemplateSpec) error {
		if image == nil {
			return fmt.Errorf("%w: Image: the image func is nil", ErrInvalid)
		}
		if t == nil {
			return fmt.Errorf("%w: Image: no pod template", ErrInvalid)
		}
		for i := range t.Spec.Containers {
			if t.Spec.Containers[i].Name != container {
				continue
			}
			img := image(revision)
			if img == "" {
				return fmt.Errorf("%w: spec.template.spec.containers[%d].image: empty for revision %q", ErrInvalid, i, revision)
			}
			t.Spec.Containers[i].Image = img
			return nil
		}
		return fmt.Errorf("%w: spec.template.spec.containers: no container named %q", ErrInvalid, container)
	}
}

// Deployer is the rollout.Deployer of one Deployment or StatefulSet: it
// puts a revision on the workload by changing its pod template with a
// TemplateFunc, and reports the revision the workload runs. Build it with
// Setter.Deployer, and give it to a Runner as RevisionA or RevisionB next to
// the Setter of the same side. Safe for concurrent use.
//
// The Runner then deploys the canary revision on the canary side only
// while it carries weight 0 and is settled at capacity 0, and waits until
// Revision reports it Updated before it adds capacity or traffic. Deploy
// refuses a workload that has replicas (a Permanent *DeployRefusedError),
// so a revision never replaces pods that serve. The workload of the first
// revision (side A) is created by the caller as usual, with no annotation;
// the other side may start at 0 replicas with any template.
//
// What a workload runs is read from what it runs (its live pod template,
// see Revision), never from a note upshift left: another writer may change
// the template after a Deploy (a GitOps tool healing toward its own copy,
// kubectl set image) and leave the annotation in place. Deploy compares
// content the same way. Updated is read from the status the workload's
// controller wrote for the current generation (observedGeneration,
// updatedReplicas, availableReplicas).
//
// Revisions live on the Deployer, a type of their own, so a Setter given
// only as a CapacitySetter never reports revisions. A workload known only
// by its scale subresource (ForScalable) has no template, and no Deployer.
// In the fixed capacity mode (no capacity setters, both sides stay
// provisioned) set FixedCapacity: the Runner deploys a side at weight 0,
// and the workload's controller replaces its pods.
type Deployer struct {
	s        *Setter
	template TemplateFunc
	// FixedCapacity lets Deploy change the template of a workload that has
	// replicas: for the fixed capacity mode (strategy.CapacityFixed, a
	// Runner with a Router and no capacity setters), where each side stays
	// provisioned and the Runner deploys a side only while it carries
	// weight 0. The workload's controller then replaces its pods by its own
	// update strategy, and Revision reports Updated once it is done. Leave
	// it false with capacity setters: the Runner deploys only at capacity
	// 0, and a workload that has replicas is refused.
	FixedCapacity bool
}

var _ rollout.Deployer = (*Deployer)(nil)

// Deployer returns the Deployer of s's workload, mapping a revision to a
// change of its pod template with template. It fails with an error
// matching ErrInvalid when template is nil or s was built by ForScalable:
// a workload known only by its scale subresource has no template to
// change, so only Deployments and StatefulSets deploy revisions (for
// another kind, implement rollout.Deployer, or rollout.RevisionReader with
// rollout.RevisionFunc when something else deploys).
//
// With no capacity setters (the fixed capacity mode), build the Setter
// only for its Deployer, and set FixedCapacity.
func (s *Setter) Deployer(template TemplateFunc) (*Deployer, error) {
	switch {
	case s == nil || s.get == nil:
		return nil, fmt.Errorf("%w: Deployer: the Setter is nil or not built by ForDeployment, ForStatefulSet or ForClient", ErrInvalid)
	case !s.templated:
		return nil, fmt.Errorf("%w: Deployer: %s has no pod template: only Deployments and StatefulSets deploy revisions", ErrInvalid, s.ref)
	case template == nil:
		return nil, fmt.Errorf("%w: Deployer: %s: the TemplateFunc is nil", ErrInvalid, s.ref)
	}
	return &Deployer{s: s, template: template}, nil
}

// ErrDeployRefused is matched by a *DeployRefusedError.
var ErrDeployRefused = errors.New("replicas: deploy refused")

// DeployRefusedError is the error, marked rollout.Permanent, of a Deploy
// that would replace running pods: the workload has replicas (and the
// Deployer is not FixedCapacity), or it is a paused Deployment, whose
// controller would keep scaling the pods of the old template. It matches
// ErrDeployRefused.
type DeployRefusedError struct {
	// Workload is "Deployment <namespace>/<name>" or "StatefulSet ...".
	Workload string
	// Revision is the revision asked for; Running the one the workload
	// runs, as Deployer.Revision recognises it from the live template
	// (the revision asked for, or the one its annotation records), ""
	// for none it recognises.
	Revision, Running string
	// Field is the field that refuses: "spec.replicas" or "spec.paused".
	Field string
	// Replicas is the workload's spec.replicas.
	Replicas int32
}

func (e *DeployRefusedError) Error() string {
	why := fmt.Sprintf("spec.replicas is %d: a revision is deployed only at 0 replicas", e.Replicas)
	if e.Field == "spec.paused" {
		why = "spec.paused is true: its controller would not roll the new template out"
	}
	return fmt.Sprintf("replicas: %s: refusing to deploy revision %q over %q: %s", e.Workload, e.Revision, e.Running, why)
}

// Is makes errors.Is(err, ErrDeployRefused) hold.
func (e *DeployRefusedError) Is(target error) bool { return target == ErrDeployRefused }

func (d *Deployer) check() error {
	if d == nil || d.s == nil || d.s.get == nil || d.template == nil {
		return rollout.Permanent(fmt.Errorf("%w: Deployer: not built by Setter.Deployer", ErrInvalid))
	}
	return nil
}

// Deploy puts revision on the workload: it applies the TemplateFunc to the
// pod template and records revision in RevisionAnnotation, on the metadata
// and the template, in one write, and only while spec.replicas is 0 (any
// count with FixedCapacity). At 0 replicas the workload's controller
// starts no pod of the new template, whatever pods of the old one are
// still stopping; Revision reports Updated once they are gone.
//
// Whether there is anything to deploy is read from the live template, not
// from the annotation: a workload whose template runs revision (the
// TemplateFunc would change nothing, see Revision) and whose annotation
// records it writes nothing, whatever the replicas; one whose template
// runs revision under another annotation (or none) gets the annotation on
// its metadata only, a write that replaces no pod, whatever the replicas.
// A workload whose annotation records revision while its template runs
// something else (another writer put the old image back) is deployed
// again, as any other. Otherwise Deploy fails, marked rollout.Permanent,
// with a *DeployRefusedError when the workload has replicas or is a paused
// Deployment, with an error matching ErrInvalid for an empty revision or
// a TemplateFunc that fails, and with the API server's error for a
// template it rejects. A missing workload matches rollout.ErrNotFound.
// Write conflicts are retried from a fresh read, so the replica check and
// the write are one atomic step; conflicts that outlast
// Setter.MaxConflictRetries match rollout.ErrConflict.
func (d *Deployer) Deploy(ctx context.Context, revision string) error {
	if err := d.check(); err != nil {
		return err
	}
	s := d.s
	if revision == "" {
		return rollout.Permanent(fmt.Errorf("%w: %s: deploy: the revision is empty", ErrInvalid, s.ref))
	}
	return s.update(ctx, func(w *liveWorkload) error {
		if w.template == nil {
			return rollout.Permanent(fmt.Errorf("%w: %s has no pod template", ErrInvalid, s.ref))
		}
		if d.runs(w.template, revision) {
			if w.meta.Annotations[RevisionAnnotation] == revision {
				return nil
			}
			// The template runs it already: record it, replacing no pod.
			if w.meta.Annotations == nil {
				w.meta.Annotations = map[string]string{}
			}
			w.meta.Annotations[RevisionAnnotation] = revision
			return s.wrap(w.update(ctx))
		}
		refused := &DeployRefusedError{Workload: s.ref, Revision: revision, Running: d.running(w, ""), Replicas: w.replicas}
		switch {
		case w.paused:
			refused.Field = "spec.paused"
			return s.refuse(ctx, w, refused)
		case w.replicas != 0 && !d.FixedCapacity:
			refused.Field = "spec.replicas"
			return s.refuse(ctx, w, refused)
		}
		if err := d.template(revision, w.template); err != nil {
			return rollout.Permanent(fmt.Errorf("%w: %s: the pod template of revision %q: %w", ErrInvalid, s.ref, revision, err))
		}
		if w.meta.Annotations == nil {
			w.meta.Annotations = map[string]string{}
		}
		w.meta.Annotations[RevisionAnnotation] = revision
		if w.template.Annotations == nil {
			w.template.Annotations = map[string]string{}
		}
		w.template.Annotations[RevisionAnnotation] = revision
		return s.wrap(w.update(ctx))
	})
}

// refuse returns the Permanent refusal of a Deploy, once the read it rests
// on is confirmed current (ForClient: a cache may serve a stale one); a
// stale read is a conflict, and the Deploy is retried from a fresh read.
func (s *Setter) refuse(ctx context.Context, w *liveWorkload, refused *DeployRefusedError) error {
	if w.confirm != nil {
		if err := w.confirm(ctx); err != nil {
			return s.wrap(err)
		}
	}
	return rollout.Permanent(refused)
}

// Revision reports the revision the workload runs, read from its live pod
// template, and whether it is fully rolled out, as kubectl rollout status
// judges it: the controller has observed the current generation, and every
// pod the spec asks for runs the current template and is available, with
// no other pod left. It waits longer than kubectl while a Deployment's
// status.replicas is above spec.replicas or status.terminatingReplicas
// counts pods still stopping. For a StatefulSet the current revision is
// also the update revision (a partitioned rolling update is not Updated
// until the partition is 0); a paused Deployment is never Updated. At 0
// replicas, Updated means the controller has observed the template and no
// pod is left.
//
// The template runs a revision when the TemplateFunc of that revision,
// applied to a copy of it, changes nothing the API server would keep
// (fields the server defaulted never hide a revision). Two revisions are
// tried: expect, the one the side's role should run, then the one
// RevisionAnnotation records (a hint). The first that the template runs
// is reported; when it runs neither, Revision is "": the workload runs
// something the Deployer does not recognise (another writer changed its
// template), which the Runner treats as another revision than its role's.
// So the workload of the first revision, created with no annotation, runs
// expect when the TemplateFunc of expect leaves its template as it is.
// See docs/design/replicas.md for the details.
func (d *Deployer) Revision(ctx context.Context, expect string) (rollout.RevisionStatus, error) {
	if err := d.check(); err != nil {
		return rollout.RevisionStatus{}, err
	}
	w, err := rollout.ReadOnce(ctx, d.s, d.s.get) // shared with the Setter's read in one reconcile
	if err != nil {
		return rollout.RevisionStatus{}, d.s.wrap(err)
	}
	rev := d.running(w, expect)
	return rollout.RevisionStatus{Revision: rev, Updated: rev != "" && w.rolledOut()}, nil
}

// running is the revision w's template runs: expect, else the one its
// annotation records, else "" (see Revision).
func (d *Deployer) running(w *liveWorkload, expect string) string {
	if d.runs(w.template, expect) {
		return expect
	}
	if hint := w.meta.Annotations[RevisionAnnotation]; hint != expect && d.runs(w.template, hint) {
		return hint
	}
	return ""
}

// rolledOut reports that the workload's controller has rolled its current
// template out to every replica the spec asks for, and left no other pod.
func (w *liveWorkload) rolledOut() bool {
	st := &w.status
	return !w.paused && st.observedGeneration >= w.meta.Generation && st.revisionsMatch &&
		st.replicas == w.replicas && st.updated == w.replicas && st.available >= w.replicas && st.terminating == 0
}
