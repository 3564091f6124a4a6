package rollout_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/upshift-dev/upshift/rollout"
)

// TestClaimedErrorSaysWhereAndHow: a ClaimedError that names its
// annotation says where the claim is and gives the commands that release
// it; one that names none (the fakes) reads as it always did; both match
// ErrClaimed.
func TestClaimedErrorSaysWhereAndHow(t *testing.T) {
	holder := rollout.Owner{Kind: "Release", Namespace: "shop", Name: "web", UID: "1111"}
	type want struct {
		msg, release, annotate, arg string
	}
	cases := []struct {
		name string
		err  rollout.ClaimedError
		want want
	}{
		{"no annotation", rollout.ClaimedError{Object: "fake route", Owner: holder},
			want{msg: "fake route is claimed by Release shop/web (uid 1111): another rollout moves it"}},
		{"workload", rollout.ClaimedError{Object: "Deployment shop/web-b", Owner: holder, Annotation: "upshift.dev/claim",
			On: rollout.ObjectRef{Group: "apps", Kind: "Deployment", Namespace: "shop", Name: "web-b"}},
			want{
				msg: "Deployment shop/web-b is claimed by Release shop/web (uid 1111): another rollout moves it; " +
					"the claim is the annotation upshift.dev/claim on Deployment shop/web-b: if that owner is gone, release it with " +
					"`kubectl upshift claims release deployment.apps/web-b -n shop --holder 1111` " +
					"(or remove it: `kubectl annotate -n shop deployment.apps/web-b upshift.dev/claim-`)",
				release:  "kubectl upshift claims release deployment.apps/web-b -n shop --holder 1111",
				annotate: "kubectl annotate -n shop deployment.apps/web-b upshift.dev/claim-",
				arg:      "deployment.apps/web-b",
			}},
		{"resource without kind", rollout.ClaimedError{Object: "rayclusters shop/rc", Owner: holder, Annotation: "upshift.dev/claim",
			On: rollout.ObjectRef{Group: "ray.io", Resource: "rayclusters", Namespace: "shop", Name: "rc"}},
			want{
				msg: "rayclusters shop/rc is claimed by Release shop/web (uid 1111): another rollout moves it; " +
					"the claim is the annotation upshift.dev/claim on rayclusters shop/rc: if that owner is gone, release it with " +
					"`kubectl upshift claims release rayclusters.ray.io/rc -n shop --holder 1111` " +
					"(or remove it: `kubectl annotate -n shop rayclusters.ray.io/rc upshift.dev/claim-`)",
				release:  "kubectl upshift claims release rayclusters.ray.io/rc -n shop --holder 1111",
				annotate: "kubectl annotate -n shop rayclusters.ray.io/rc upshift.dev/claim-",
				arg:      "rayclusters.ray.io/rc",
			}},
		{"core group, cluster scope", rollout.ClaimedError{Object: "Namespace shop", Owner: holder, Annotation: "upshift.dev/claim",
			On: rollout.ObjectRef{Kind: "Namespace", Name: "shop"}},
			want{
				msg: "Namespace shop is claimed by Release shop/web (uid 1111): another rollout moves it; " +
					"the claim is the annotation upshift.dev/claim on Namespace shop: if that owner is gone, release it with " +
					"`kubectl upshift claims release namespace/shop --holder 1111` " +
					"(or remove it: `kubectl annotate namespace/shop upshift.dev/claim-`)",
				release:  "kubectl upshift claims release namespace/shop --holder 1111",
				annotate: "kubectl annotate namespace/shop upshift.dev/claim-",
				arg:      "namespace/shop",
			}},
		{"annotation on nothing", rollout.ClaimedError{Object: "x", Owner: holder, Annotation: "upshift.dev/claim"},
			want{msg: "x is claimed by Release shop/web (uid 1111): another rollout moves it"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var err error = &c.err
			got := want{msg: err.Error(), release: c.err.ReleaseCommand(), annotate: c.err.AnnotateCommand(), arg: c.err.On.Arg()}
			if diff := cmp.Diff(c.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			wrapped := fmt.Errorf("router: claim: %w", err)
			var ce *rollout.ClaimedError
			if !errors.Is(wrapped, rollout.ErrClaimed) || !errors.As(wrapped, &ce) || ce.Owner != holder {
				t.Errorf("a wrapped ClaimedError does not match ErrClaimed and itself: %v", wrapped)
			}
		})
	}
}

// A claim whose owner is gone blocks a new rollout; the error says which
// annotation holds it and how to release it.
func ExampleClaimedError() {
	err := &rollout.ClaimedError{
		Object:     "Deployment shop/web-b",
		Owner:      rollout.Owner{Kind: "Release", Namespace: "shop", Name: "web", UID: "1111"},
		Annotation: "upshift.dev/claim",
		On:         rollout.ObjectRef{Group: "apps", Kind: "Deployment", Namespace: "shop", Name: "web-b"},
	}
	fmt.Println(errors.Is(err, rollout.ErrClaimed))
	fmt.Println(err.On.Arg())
	fmt.Println(err.ReleaseCommand())
	fmt.Println(err.AnnotateCommand())
	// Output:
	// true
	// deployment.apps/web-b
	// kubectl upshift claims release deployment.apps/web-b -n shop --holder 1111
	// kubectl annotate -n shop deployment.apps/web-b upshift.dev/claim-
}
