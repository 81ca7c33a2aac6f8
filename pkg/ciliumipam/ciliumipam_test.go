package ciliumipam

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestFromJSON(t *testing.T) {
	for _, tc := range []struct {
		name               string
		obj                string
		mode               string
		capacity, used     int64
		families           int
		unsupported, error string
	}{
		{name: "pool", obj: `{"spec": {"ipam": {"pool": {"10.1.0.4": {"resource": "nic-0"}, "10.1.0.5": {}, "10.1.0.6": {}}}},
			"status": {"ipam": {"used": {"10.1.0.4": {"owner": "router"}, "10.1.0.9": {"owner": "outside the pool"}}}}}`,
			mode: ModePool, capacity: 3, used: 1, families: 1},
		{name: "pool, dual stack", obj: `{"spec": {"ipam": {"pool": {"10.1.0.4": {}, "10.1.0.5": {}}, "ipv6-pool": {"fd00::4": {}, "fd00::5": {}, "fd00::6": {}}}},
			"status": {"ipam": {"used": {"10.1.0.4": {}}, "ipv6-used": {"fd00::4": {}, "fd00::5": {}, "fd00::6": {}}}}}`,
			mode: ModePool, capacity: 3, used: 3, families: 2},
		{name: "podCIDRs", obj: `{"spec": {"ipam": {"podCIDRs": ["10.0.1.0/24"]}},
			"status": {"ipam": {"used": {"10.0.1.1": {"owner": "router"}, "10.0.1.0": {}, "10.0.1.255": {}, "10.0.2.1": {}}}}}`,
			mode: ModePodCIDRs, capacity: 254, used: 1, families: 1},
		{name: "podCIDRs, a /31 first: the agent allocates from it alone", obj: `{"spec": {"ipam": {"podCIDRs": ["10.0.1.0/31", "10.0.2.0/24"]}},
			"status": {"ipam": {"used": {"10.0.1.0": {}, "10.0.2.7": {}}}}}`,
			mode: ModePodCIDRs, capacity: 2, used: 1, families: 1},
		{name: "podCIDRs, dual stack", obj: `{"spec": {"ipam": {"podCIDRs": ["10.0.1.0/28", "fd00::/64"]}},
			"status": {"ipam": {"used": {"10.0.1.1": {}, "fd00::1": {}}}}}`,
			mode: ModePodCIDRs, capacity: 14, used: 1, families: 2},
		{name: "podCIDRs, nothing used", obj: `{"spec": {"ipam": {"podCIDRs": ["10.0.1.0/24"]}}, "status": {"ipam": {"pod-cidrs": {"10.0.1.0/24": {"status": "in-use"}}}}}`,
			unsupported: "status.ipam.used lists none"},
		{name: "multi-pool", obj: `{"spec": {"ipam": {"pools": {"allocated": [{"pool": "default", "cidrs": ["10.0.0.0/27"]}]}}}}`,
			unsupported: "neither a pool nor podCIDRs"},
		{name: "empty", obj: `{}`, unsupported: "neither a pool nor podCIDRs"},
		{name: "bad CIDR", obj: `{"spec": {"ipam": {"podCIDRs": ["10.0.1.0/33"]}}, "status": {"ipam": {"used": {"10.0.1.1": {}}}}}`,
			error: "spec.ipam.podCIDRs"},
		{name: "bad used key", obj: `{"spec": {"ipam": {"podCIDRs": ["10.0.1.0/24"]}}, "status": {"ipam": {"used": {"router": {}}}}}`,
			error: `status.ipam.used: key "router" is not an IP address`},
		{name: "bad pool key", obj: `{"spec": {"ipam": {"pool": {"10.0.1.300": {}}}}, "status": {"ipam": {"used": {"10.0.1.1": {}}}}}`,
			error: `spec.ipam.pool: key "10.0.1.300"`},
		{name: "wrong type", obj: `{"spec": {"ipam": {"podCIDRs": "10.0.1.0/24"}}}`, error: "CiliumNode: json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := FromJSON([]byte(tc.obj))
			switch {
			case tc.unsupported != "":
				if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.unsupported) {
					t.Fatalf("FromJSON = %+v, %v; want unsupported (%s)", u, err, tc.unsupported)
				}
			case tc.error != "":
				if err == nil || errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.error) {
					t.Fatalf("FromJSON = %+v, %v; want an error naming %s", u, err, tc.error)
				}
			case err != nil || u.Mode != tc.mode || u.Capacity != tc.capacity || u.Used != tc.used || len(u.Families) != tc.families:
				t.Fatalf("FromJSON = %+v, %v; want mode %s, %d of %d used, %d families", u, err, tc.mode, tc.used, tc.capacity, tc.families)
			}
		})
	}
}

// A map with more entries than MaxEntries is refused, not walked.
func TestFromJSONBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"spec": {"ipam": {"podCIDRs": ["10.0.0.0/8"]}}, "status": {"ipam": {"used": {`)
	for i := range MaxEntries + 1 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"10.%d.%d.%d": {}`, i>>16, (i>>8)&255, i&255)
	}
	b.WriteString(`}}}}`)
	if _, err := FromJSON([]byte(b.String())); err == nil || !strings.Contains(err.Error(), "more than 65536") {
		t.Fatalf("FromJSON of %d used addresses: %v", MaxEntries+1, err)
	}
}

func FuzzFromJSON(f *testing.F) {
	f.Add(`{"spec": {"ipam": {"pool": {"10.1.0.4": {}}}}, "status": {"ipam": {"used": {"10.1.0.4": {}}}}}`)
	f.Add(`{"spec": {"ipam": {"podCIDRs": ["10.0.1.0/24", "::/0"]}}, "status": {"ipam": {"used": {"10.0.1.1": {}, "::ffff:10.0.1.2": {}}}}}`)
	f.Add(`{"spec": {"ipam": {"podCIDRs": ["0.0.0.0/0"]}}, "status": {"ipam": {"ipv6-used": {"fd00::1": {}}}}}`)
	f.Fuzz(func(t *testing.T, obj string) {
		u, err := FromJSON([]byte(obj))
		if err != nil {
			return
		}
		if u.Capacity < 0 || u.Used < 0 || u.Used > u.Capacity || len(u.Families) == 0 {
			t.Fatalf("FromJSON(%s) = %+v", obj, u)
		}
		for _, f := range u.Families {
			if f.Used > f.Capacity || f.Free() < u.Capacity-u.Used {
				t.Fatalf("family %+v inconsistent with %+v", f, u)
			}
		}
	})
}
