package validate

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ErrInvalid is wrapped by every ErrorList: the object is not valid Istio
// configuration.
var ErrInvalid = errors.New("validate: invalid configuration")

// FieldError is one problem with one field, e.g.
// "spec.http[0].route[1].destination.host: required".
type FieldError struct {
	// Field is the path of the field as a user writes it (JSON names).
	Field string
	// Detail says what is wrong.
	Detail string
}

// Error returns "field: detail".
func (e FieldError) Error() string { return e.Field + ": " + e.Detail }

// ErrorList is every problem found in one object; empty means valid. A
// non-empty list is an error that wraps ErrInvalid.
type ErrorList []FieldError

// Error joins the problems with "; ".
func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap lets errors.Is(list, ErrInvalid) hold.
func (l ErrorList) Unwrap() error { return ErrInvalid }

// Err returns l as an error, or nil when l is empty.
func (l ErrorList) Err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// errs collects FieldErrors while a validator walks an object.
type errs struct {
	list ErrorList
}

func (e *errs) add(p *field.Path, format string, args ...any) {
	e.list = append(e.list, FieldError{Field: p.String(), Detail: fmt.Sprintf(format, args...)})
}

func (e *errs) required(p *field.Path) { e.add(p, "required") }
