package ca

import (
	"encoding/base64"
	"math"
	"strconv"
	"testing"
)

// FuzzTokenExpiry: whatever a caller presents as a token, reading its exp
// claim never panics, and a claim it reads is a positive time within the
// bound it keeps; a token built with a whole-second exp gives it back.
func FuzzTokenExpiry(f *testing.F) {
	jwt := func(payload string) string {
		return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2ln"
	}
	f.Add(jwt(`{"exp":1767225600}`))
	f.Add(jwt(`{"exp":1.5e9}`))
	f.Add(jwt(`{"exp":-1}`))
	f.Add(jwt(`{"exp":"soon"}`))
	f.Add("a.b")
	f.Add("..")
	f.Fuzz(func(t *testing.T, token string) {
		at, ok := tokenExpiry(token)
		if ok && (at.Unix() < 0 || float64(at.Unix()) > math.MaxInt32*4) {
			t.Fatalf("expiry %v out of bounds", at)
		}
		if !ok || at.Nanosecond() != 0 {
			return
		}
		// The same exp, written as a whole number, reads back the same.
		again, ok := tokenExpiry(jwt(`{"exp":` + strconv.FormatInt(at.Unix(), 10) + `}`))
		if !ok || !again.Equal(at) {
			t.Fatalf("exp %d read back as %v %v", at.Unix(), again, ok)
		}
	})
}
