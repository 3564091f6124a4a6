package replicas_test

import (
	"fmt"
	"regexp"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"pgregory.net/rapid"

	"github.com/upshift-dev/upshift/serve/replicas"
)

func imageTemplate(container, image string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: container, Image: image}}}}
}

// TestIdentity: fixed identities (a change of the digest's input is a
// change of every identity stored), distinct for distinct templates,
// split back into the revision and the digest.
func TestIdentity(t *testing.T) {
	cases := []struct {
		revision string
		tmpl     corev1.PodTemplateSpec
		want     string
	}{
		{"v2", imageTemplate("app", "registry.example/shop:v2"), "v2@18fcb157"},
		{"v2", imageTemplate("app", "mirror.example/shop:v2"), "v2@7418c2b2"},
		{"v2", imageTemplate("web", "registry.example/shop:v2"), "v2@494be63d"},
		{"a@b", imageTemplate("app", "x:1"), "a@b@db0e1b63"},
	}
	for _, tc := range cases {
		got := replicas.Identity(tc.revision, tc.tmpl)
		if got != tc.want {
			t.Errorf("Identity(%q, %s) = %q, want %q", tc.revision, tc.tmpl.Spec.Containers[0].Image, got, tc.want)
		}
		if rev, digest := replicas.SplitIdentity(got); rev != tc.revision || digest != got[len(got)-8:] {
			t.Errorf("SplitIdentity(%q) = %q, %q", got, rev, digest)
		}
	}
	for _, bare := range []string{"v2", "", "v2@", "v2@18FCB157", "v2@18fcb15", "v2@18fcb1577", "v2@18fcb15g"} {
		if rev, digest := replicas.SplitIdentity(bare); rev != bare || digest != "" {
			t.Errorf("SplitIdentity(%q) = %q, %q; want it whole and no digest", bare, rev, digest)
		}
	}
}

// TestIdentityProperties: an identity is the revision, "@" and 8
// hexadecimal digits; the same input gives the same identity; another
// image gives another one (for these inputs).
func TestIdentityProperties(t *testing.T) {
	form := regexp.MustCompile(`(?s)^(.*)@[0-9a-f]{8}$`)
	rapid.Check(t, func(t *rapid.T) {
		rev := rapid.String().Draw(t, "revision")
		img := rapid.StringMatching(`[a-z./:]{1,20}`).Draw(t, "image")
		id := replicas.Identity(rev, imageTemplate("app", img))
		if m := form.FindStringSubmatch(id); m == nil || m[1] != rev {
			t.Fatalf("identity %q of revision %q", id, rev)
		}
		if again := replicas.Identity(rev, imageTemplate("app", img)); again != id {
			t.Fatalf("not deterministic: %q, %q", id, again)
		}
		if other := replicas.Identity(rev, imageTemplate("app", img+"-x")); other == id {
			t.Fatalf("images %q and %q-x share identity %q", img, img, id)
		}
		if r, _ := replicas.SplitIdentity(id); r != rev {
			t.Fatalf("SplitIdentity(%q) = %q, want %q", id, r, rev)
		}
	})
}

// An operator whose spec holds an image template next to the revision
// gives the Runner identities: editing the template is a new identity,
// rolled out as a new revision.
func ExampleIdentity() {
	render := func(revision, imageTemplate string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "app", Image: regexp.MustCompile(`\{revision\}`).ReplaceAllString(imageTemplate, revision)}}}}
	}
	before := replicas.Identity("v2", render("v2", "registry.example/shop:{revision}"))
	after := replicas.Identity("v2", render("v2", "mirror.example/shop:{revision}"))
	rev, digest := replicas.SplitIdentity(after)
	fmt.Println(before != after, rev, len(digest))
	// Output: true v2 8
}
