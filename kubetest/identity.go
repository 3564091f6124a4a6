package kubetest

import (
	"context"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// helperTimeout bounds each helper's API calls. The helpers take no context:
// they run in test setup, and a test's own context is already cancelled when
// its Cleanup functions run.
const helperTimeout = 30 * time.Second

func helperContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), helperTimeout)
}

// Namespace creates a namespace with a fresh name derived from tb.Name and
// returns its name. Namespaces are not deleted: nothing would finalise them,
// and the whole etcd is discarded when the package's tests end.
func (e *Env) Namespace(tb TB) string {
	tb.Helper()
	ctx, cancel := helperContext()
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: namePrefix(tb.Name()),
		Labels:       map[string]string{"upshift.dev/test": "true"},
	}}
	if err := e.Client.Create(ctx, ns); err != nil {
		tb.Fatalf("kubetest: creating a namespace: %v", err)
	}
	return ns.Name
}

// namePrefix turns a test name into a GenerateName prefix: lower case
// letters, digits and '-', at most 40 characters, ending in '-'.
func namePrefix(test string) string {
	var b strings.Builder
	dash := true // no leading '-'
	for _, r := range strings.ToLower(test) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
		if b.Len() >= 40 {
			break
		}
	}
	s := strings.TrimRight(b.String(), "-")
	if s == "" || s[0] < 'a' {
		s = "t" + s
	}
	return s + "-"
}

// User returns Clients that authenticate as the user name with the given
// groups (plus system:authenticated), by a client certificate signed by the
// control plane's CA: real authentication, no impersonation. The user has no
// permissions until a test grants them ([Env.Grant] with the returned
// Subject).
func (e *Env) User(tb TB, name string, groups ...string) *Clients {
	tb.Helper()
	e.userMu.Lock()
	u, err := e.te.AddUser(envtest.User{Name: name, Groups: groups}, &rest.Config{QPS: e.Config.QPS, Burst: e.Config.Burst})
	e.userMu.Unlock()
	if err != nil {
		tb.Fatalf("kubetest: adding user %q: %v", name, err)
	}
	c := e.ClientsFor(tb, u.Config())
	c.Subject = rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
	return c
}

// ServiceAccount creates the ServiceAccount namespace/name unless it exists
// and returns Clients that authenticate with a bearer token for it from the
// TokenRequest API, as a workload in the cluster would. Its username is
// system:serviceaccount:<namespace>:<name>. The ServiceAccount has no
// permissions until a test grants them ([Env.Grant] with the returned
// Subject).
func (e *Env) ServiceAccount(tb TB, namespace, name string) *Clients {
	tb.Helper()
	ctx, cancel := helperContext()
	defer cancel()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := e.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatalf("kubetest: creating ServiceAccount %s/%s: %v", namespace, name, err)
	}
	expiry := int64(time.Hour / time.Second)
	tr, err := e.Kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}},
		metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("kubetest: token for ServiceAccount %s/%s: %v", namespace, name, err)
	}
	cfg := rest.AnonymousClientConfig(e.Config)
	cfg.BearerToken = tr.Status.Token
	c := e.ClientsFor(tb, cfg)
	c.Subject = rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}
	return c
}

// Grant creates a Role in namespace with rules, binds it to subject, and
// waits until the API server's authorizer allows the first verb on the first
// resource of every rule for the subject, so that the next request does not
// race RBAC's cache. It returns the Role's name.
//
// For a least-privilege test:
//
//	sa := env.ServiceAccount(t, ns, "router")
//	env.Grant(t, ns, sa.Subject, rbacv1.PolicyRule{
//		APIGroups: []string{"gateway.networking.k8s.io"},
//		Resources: []string{"httproutes", "grpcroutes"},
//		Verbs:     []string{"get", "update", "patch"},
//	})
//	// sa.Client, sa.Gateway: allowed exactly that.
func (e *Env) Grant(tb TB, namespace string, subject rbacv1.Subject, rules ...rbacv1.PolicyRule) string {
	tb.Helper()
	ctx, cancel := helperContext()
	defer cancel()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: namePrefix(subject.Name)},
		Rules:      rules,
	}
	if err := e.Client.Create(ctx, role); err != nil {
		tb.Fatalf("kubetest: creating Role in %s: %v", namespace, err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{subject},
	}
	if err := e.Client.Create(ctx, binding); err != nil {
		tb.Fatalf("kubetest: creating RoleBinding %s/%s: %v", namespace, role.Name, err)
	}
	if err := e.waitAllowed(ctx, namespace, subject, rules); err != nil {
		tb.Fatalf("kubetest: Role %s/%s for %s %q: %v", namespace, role.Name, subject.Kind, subject.Name, err)
	}
	return role.Name
}

// waitAllowed polls SubjectAccessReviews until every rule's first verb on
// its first group/resource is allowed for subject.
func (e *Env) waitAllowed(ctx context.Context, namespace string, subject rbacv1.Subject, rules []rbacv1.PolicyRule) error {
	spec := authorizationv1.SubjectAccessReviewSpec{}
	switch subject.Kind {
	case rbacv1.ServiceAccountKind:
		spec.User = "system:serviceaccount:" + subject.Namespace + ":" + subject.Name
		spec.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + subject.Namespace, "system:authenticated"}
	case rbacv1.UserKind:
		spec.User = subject.Name
		spec.Groups = []string{"system:authenticated"}
	case rbacv1.GroupKind:
		spec.User = "upshift-kubetest-probe"
		spec.Groups = []string{subject.Name, "system:authenticated"}
	default:
		return fmt.Errorf("unknown subject kind %q", subject.Kind)
	}
	var reviews []authorizationv1.SubjectAccessReviewSpec
	for _, r := range rules {
		if len(r.Verbs) == 0 || len(r.Resources) == 0 {
			continue
		}
		s := spec
		ra := &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: r.Verbs[0], Resource: r.Resources[0]}
		if len(r.APIGroups) > 0 {
			ra.Group = r.APIGroups[0]
		}
		if len(r.ResourceNames) > 0 {
			ra.Name = r.ResourceNames[0]
		}
		if g, sub, ok := strings.Cut(ra.Resource, "/"); ok {
			ra.Resource, ra.Subresource = g, sub
		}
		s.ResourceAttributes = ra
		reviews = append(reviews, s)
	}
	var last string
	err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for len(reviews) > 0 {
			sar := &authorizationv1.SubjectAccessReview{Spec: reviews[0]}
			got, err := e.Kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if !got.Status.Allowed {
				ra := reviews[0].ResourceAttributes
				last = fmt.Sprintf("%s %s.%s not yet allowed", ra.Verb, ra.Resource, ra.Group)
				return false, nil
			}
			reviews = reviews[1:]
		}
		return true, nil
	})
	if err != nil && last != "" {
		return fmt.Errorf("%s: %w", last, err)
	}
	return err
}
