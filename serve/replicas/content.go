package replicas

import (
	"reflect"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

// runs reports whether the live pod template runs revision: the template
// that the TemplateFunc makes of it for revision (applied to a copy) sets
// nothing the live one lacks (see covers). A TemplateFunc that fails for
// revision recognises nothing.
func (d *Deployer) runs(live *corev1.PodTemplateSpec, revision string) bool {
	if live == nil || revision == "" {
		return false
	}
	want := live.DeepCopy()
	if err := d.template(revision, want); err != nil {
		return false
	}
	return covers(reflect.ValueOf(want).Elem(), reflect.ValueOf(live).Elem())
}

// covers reports whether live carries every value that want sets, as the
// API server stores a template that was written as want: a field want
// leaves at its zero value (unset: nil, "", 0, false) may hold anything in
// live, since the server defaults such fields (imagePullPolicy,
// terminationMessagePath, a port's protocol, a probe's periods...); every
// field want sets must hold an equal value in live; a list or a map must
// have as many elements in live as in want (the server adds no element to
// a pod template), each covered in turn (a map's by key). Quantities and
// other values with unexported fields compare as apiequality.Semantic
// compares them. want and live are values of one type.
func covers(want, live reflect.Value) bool {
	switch want.Kind() {
	case reflect.Pointer:
		switch {
		case want.IsNil():
			return true
		case live.IsNil():
			return covers(want.Elem(), reflect.Zero(want.Type().Elem()))
		}
		return covers(want.Elem(), live.Elem())
	case reflect.Interface:
		return want.IsNil() || !live.IsNil() && reflect.DeepEqual(want.Interface(), live.Interface())
	case reflect.Struct:
		if opaque(want.Type()) {
			return want.IsZero() || apiequality.Semantic.DeepEqual(want.Interface(), live.Interface())
		}
		for i := range want.NumField() {
			if !covers(want.Field(i), live.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if want.Len() != live.Len() {
			return false
		}
		for i := range want.Len() {
			if !covers(want.Index(i), live.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if want.Len() != live.Len() {
			return false
		}
		it := want.MapRange()
		for it.Next() {
			l := live.MapIndex(it.Key())
			if !l.IsValid() || !covers(it.Value(), l) {
				return false
			}
		}
		return true
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return want.IsNil() // no such field in a pod template
	}
	return want.IsZero() || want.Equal(live)
}

// quantity is the type of resource.Quantity, compared as a whole.
var quantity = reflect.TypeFor[resource.Quantity]()

// opaque reports whether a struct type is compared as a whole rather than
// field by field: it has unexported fields (a Quantity, a time.Time).
func opaque(t reflect.Type) bool {
	if t == quantity {
		return true
	}
	for i := range t.NumField() {
		if !t.Field(i).IsExported() {
			return true
		}
	}
	return false
}
