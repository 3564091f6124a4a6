package gateway

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ManagedByLabel marks the objects the builders create.
const ManagedByLabel = "app.kubernetes.io/managed-by"

// Listener is one listener of a Gateway built by BuildGateway.
type Listener struct {
	Name string
	// Protocol is HTTP (the default), HTTPS, GRPC... as Gateway API names it.
	Protocol gwv1.ProtocolType
	Port     int32
	// Hostname restricts the listener to one host (may be a wildcard).
	Hostname string
	// TLSSecrets name Secrets in the Gateway's namespace holding the
	// certificates, for HTTPS; the TLS mode is Terminate.
	TLSSecrets []string
}

// BuildGateway returns a Gateway of the given class with the listeners.
func BuildGateway(namespace, name, className string, listeners ...Listener) (*gwv1.Gateway, error) {
	if name == "" || namespace == "" || className == "" {
		return nil, fmt.Errorf("%w: a gateway needs a name, a namespace and a class", ErrInvalid)
	}
	if len(listeners) == 0 {
		return nil, fmt.Errorf("%w: gateway %s/%s: at least one listener is required", ErrInvalid, namespace, name)
	}
	gw := &gwv1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{ManagedByLabel: "upshift"}},
		Spec:       gwv1.GatewaySpec{GatewayClassName: gwv1.ObjectName(className)},
	}
	for i, l := range listeners {
		if l.Name == "" || l.Port <= 0 || l.Port > 65535 {
			return nil, fmt.Errorf("%w: listeners[%d]: a name and a port in 1..65535 are required", ErrInvalid, i)
		}
		proto := l.Protocol
		if proto == "" {
			proto = gwv1.HTTPProtocolType
		}
		gl := gwv1.Listener{Name: gwv1.SectionName(l.Name), Protocol: proto, Port: gwv1.PortNumber(l.Port)}
		if l.Hostname != "" {
			h := gwv1.Hostname(l.Hostname)
			gl.Hostname = &h
		}
		if len(l.TLSSecrets) > 0 {
			mode := gwv1.TLSModeTerminate
			gl.TLS = &gwv1.ListenerTLSConfig{Mode: &mode}
			for _, s := range l.TLSSecrets {
				gl.TLS.CertificateRefs = append(gl.TLS.CertificateRefs, gwv1.SecretObjectReference{Name: gwv1.ObjectName(s)})
			}
		} else if proto == gwv1.HTTPSProtocolType {
			return nil, fmt.Errorf("%w: listeners[%d]: HTTPS needs TLSSecrets", ErrInvalid, i)
		}
		gw.Spec.Listeners = append(gw.Spec.Listeners, gl)
	}
	return gw, nil
}

// RouteSpec describes an HTTPRoute for two backends.
type RouteSpec struct {
	Namespace, Name string
	// Gateway is the parent Gateway, in the route's namespace unless
	// GatewayNamespace is set; SectionName picks one listener.
	Gateway, GatewayNamespace, SectionName string
	Hostnames                              []string
	// PathPrefix matches requests; empty means "/".
	PathPrefix string
	// A and B are the two backends; A starts with all the traffic.
	A, B Backend
}

// BuildHTTPRoute returns an HTTPRoute with one rule that splits traffic
// between A (weight 100) and B (weight 0).
func BuildHTTPRoute(s RouteSpec) (*gwv1.HTTPRoute, error) {
	if s.Name == "" || s.Namespace == "" || s.Gateway == "" || s.A.Name == "" || s.B.Name == "" {
		return nil, fmt.Errorf("%w: a route needs a name, a namespace, a gateway and two backends", ErrInvalid)
	}
	parent := gwv1.ParentReference{Name: gwv1.ObjectName(s.Gateway)}
	if s.GatewayNamespace != "" {
		ns := gwv1.Namespace(s.GatewayNamespace)
		parent.Namespace = &ns
	}
	if s.SectionName != "" {
		sn := gwv1.SectionName(s.SectionName)
		parent.SectionName = &sn
	}
	prefix := s.PathPrefix
	if prefix == "" {
		prefix = "/"
	}
	match := gwv1.PathMatchPathPrefix
	rt := &gwv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, Labels: map[string]string{ManagedByLabel: "upshift"}},
		Spec: gwv1.HTTPRouteSpec{
			CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{parent}},
			Rules: []gwv1.HTTPRouteRule{{
				Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: &match, Value: &prefix}}},
				BackendRefs: []gwv1.HTTPBackendRef{backendRef(s.A, 100), backendRef(s.B, 0)},
			}},
		},
	}
	for _, h := range s.Hostnames {
		rt.Spec.Hostnames = append(rt.Spec.Hostnames, gwv1.Hostname(h))
	}
	return rt, nil
}

func backendRef(b Backend, weight int32) gwv1.HTTPBackendRef {
	ref := gwv1.HTTPBackendRef{BackendRef: gwv1.BackendRef{
		BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(b.Name)},
		Weight:                 &weight,
	}}
	if b.Group != "" {
		g := gwv1.Group(b.Group)
		ref.Group = &g
	}
	if b.Kind != "" {
		k := gwv1.Kind(b.Kind)
		ref.Kind = &k
	}
	if b.Namespace != "" {
		ns := gwv1.Namespace(b.Namespace)
		ref.Namespace = &ns
	}
	if b.Port != 0 {
		p := gwv1.PortNumber(b.Port)
		ref.Port = &p
	}
	return ref
}

// CreateOrAdopt creates obj, or, when an object of that name exists,
// adopts it as it is: it reads it into obj and writes nothing, so no field
// the user owns is ever overwritten. It reports whether it adopted.
func CreateOrAdopt(ctx context.Context, c client.Client, obj client.Object) (adopted bool, err error) {
	err = c.Create(ctx, obj)
	if err == nil {
		return false, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return false, fmt.Errorf("gateway: creating %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return false, fmt.Errorf("gateway: reading %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return true, nil
}
