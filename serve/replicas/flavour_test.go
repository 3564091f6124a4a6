package replicas_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/upshift-dev/upshift/kubetest"
	"github.com/upshift-dev/upshift/serve/replicas"
)

// The flavours of Setter the tests run against: the client-go clientsets
// (ForDeployment, ForStatefulSet, ForScalable over the dynamic client) and
// a controller-runtime client (ForClient).
const (
	clientset         = "clientset"
	controllerRuntime = "controller-runtime"
)

var flavours = []string{clientset, controllerRuntime}

// kinds builds Setters of one flavour for one identity.
type kinds struct {
	t       testing.TB
	env     *kubetest.Env
	flavour string
	cs      kubernetes.Interface
	dyn     dynamic.Interface
	c       client.Client
	// synced, when set, waits until the client's reads show the
	// workload as the API server has it (a cache-backed client).
	synced func(t testing.TB, ns, name string)
}

// forEachFlavour runs f as a subtest per flavour, with the administrator's
// clients.
func forEachFlavour(t *testing.T, f func(t *testing.T, k kinds)) {
	t.Helper()
	env := kubetest.Get(t)
	for _, fl := range flavours {
		t.Run(fl, func(t *testing.T) { f(t, newKinds(t, env, fl, env.Config)) })
	}
}

func newKinds(t testing.TB, env *kubetest.Env, flavour string, cfg *rest.Config) kinds {
	t.Helper()
	k := kinds{t: t, env: env, flavour: flavour}
	var err error
	switch flavour {
	case clientset:
		if k.cs, err = kubernetes.NewForConfig(cfg); err == nil {
			k.dyn, err = dynamic.NewForConfig(cfg)
		}
	default:
		k.c, err = client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// For returns the same flavour's kinds for another identity.
func (k kinds) For(cfg *rest.Config) kinds { return newKinds(k.t, k.env, k.flavour, cfg) }

func (k kinds) forClient(obj client.Object, full int32) *replicas.Setter {
	k.t.Helper()
	s, err := replicas.ForClient(k.c, obj, full)
	if err != nil {
		k.t.Fatal(err)
	}
	return s
}

func (k kinds) Deployment(ns, name string, full int32) *replicas.Setter {
	if k.c != nil {
		return k.forClient(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, full)
	}
	return replicas.ForDeployment(k.cs, replicas.Workload{Namespace: ns, Name: name, FullReplicas: full})
}

func (k kinds) StatefulSet(ns, name string, full int32) *replicas.Setter {
	if k.c != nil {
		return k.forClient(&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, full)
	}
	return replicas.ForStatefulSet(k.cs, replicas.Workload{Namespace: ns, Name: name, FullReplicas: full})
}

// Scalable manages a Deployment as a kind known only by its scale
// subresource.
func (k kinds) Scalable(ns, name string, full int32) *replicas.Setter {
	if k.c != nil {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("apps/v1")
		u.SetKind("Deployment")
		u.SetNamespace(ns)
		u.SetName(name)
		return k.forClient(u, full)
	}
	return replicas.ForScalable(k.dyn, schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, replicas.Workload{Namespace: ns, Name: name, FullReplicas: full})
}
