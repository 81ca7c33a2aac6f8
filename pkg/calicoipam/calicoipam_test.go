package calicoipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/headroom-k8s/headroom/pkg/calicoipam/calicotest"
)

// blockJSON is an IPAMBlock as Calico writes it, with the addresses of
// allocated held by pods of the node named.
func blockJSON(cidr, affinity string, allocated map[int]string) []byte {
	holders := map[int]calicotest.Holder{}
	for i, node := range allocated {
		holders[i] = calicotest.Holder{Node: node, Pod: fmt.Sprintf("p%d", i)}
	}
	b, _ := json.Marshal(calicotest.Block(cidr, affinity, holders))
	return b
}

func alloc(node string, ordinals ...int) map[int]string {
	m := map[int]string{}
	for _, o := range ordinals {
		m[o] = node
	}
	return m
}

func upTo(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func mustBlock(t *testing.T, b []byte) Block {
	t.Helper()
	blk, err := ParseBlock(b)
	if err != nil {
		t.Fatal(err)
	}
	return blk
}

func mustPool(t *testing.T, js string) Pool {
	t.Helper()
	p, err := ParsePool([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseBlock(t *testing.T) {
	m := alloc("a", 0, 1, 2)
	m[5] = "b" // borrowed by b
	blk := mustBlock(t, blockJSON("10.0.0.0/28", "host:a", m))
	if blk.Allocated != 4 || blk.Unallocated != 12 || blk.Pods != 4 || len(blk.Lent) != 1 || blk.Lent["b"] != (Held{Addresses: 1, Pods: 1}) ||
		blk.AffineTo("b") || !blk.AffineTo("a") || blk.Owner() != "a" {
		t.Fatalf("%+v", blk)
	}
	for name, js := range map[string]string{
		"short allocations": `{"spec": {"cidr": "10.0.0.0/30", "allocations": [null, null]}}`,
		"bad cidr":          `{"spec": {"cidr": "10.0.0.0/33", "allocations": []}}`,
		"attribute index":   `{"spec": {"cidr": "10.0.0.0/31", "allocations": [0, null], "attributes": []}}`,
		"negative index":    `{"spec": {"cidr": "10.0.0.0/31", "allocations": [-1, null], "attributes": [{}]}}`,
		"too many free":     `{"spec": {"cidr": "10.0.0.0/31", "allocations": [0, null], "attributes": [{}], "unallocated": [1, 0]}}`,
		"huge block":        `{"spec": {"cidr": "10.0.0.0/8", "allocations": []}}`,
		"allocations type":  `{"spec": {"cidr": "10.0.0.0/31", "allocations": "x"}}`,
	} {
		if _, err := ParseBlock([]byte(js)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestParsePool(t *testing.T) {
	p := mustPool(t, `{"metadata": {"name": "default-ipv4-ippool"}, "spec": {"cidr": "10.244.0.0/16", "nodeSelector": "all()"}}`)
	if p.BlockBits != 26 || !p.Usable || !p.Workload {
		t.Fatalf("%+v", p)
	}
	if p := mustPool(t, `{"spec": {"cidr": "fd00::/48"}}`); p.BlockBits != 122 {
		t.Fatalf("IPv6 default block size: %+v", p)
	}
	if p := mustPool(t, `{"spec": {"cidr": "10.0.0.0/16", "allowedUses": ["Tunnel"]}}`); p.Workload || p.Usable {
		t.Fatalf("tunnel pool: %+v", p)
	}
	if p := mustPool(t, `{"spec": {"cidr": "10.0.0.0/16", "disabled": true, "nodeSelector": "zone == 'a'"}}`); p.Usable {
		t.Fatalf("disabled pool: %+v", p)
	}
	if _, err := ParsePool([]byte(`{"spec": {"cidr": "10.0.0.0/16", "nodeSelector": "zone == 'a'"}}`)); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("selector: %v", err)
	}
	for _, js := range []string{`{"spec": {"cidr": "10.0.0.0/24", "blockSize": 20}}`, `{"spec": {"cidr": "10.0.0.0/16", "blockSize": 33}}`,
		`{"spec": {"cidr": "10.0.0.0/8", "blockSize": 8}}`, `{"spec": {"cidr": "x"}}`} {
		if _, err := ParsePool([]byte(js)); err == nil || errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want an error", js, err)
		}
	}
}

func TestParseConfigAndFamilies(t *testing.T) {
	if c, err := ParseConfig([]byte(`{"spec": {"strictAffinity": true, "maxBlocksPerHost": 2}}`)); err != nil || c != (Config{StrictAffinity: true, AutoAllocateBlocks: true, MaxBlocksPerHost: 2}) {
		t.Fatalf("%+v %v", c, err)
	}
	if c, err := ParseConfig([]byte(`{"spec": {"autoAllocateBlocks": false}}`)); err != nil || c.AutoAllocateBlocks {
		t.Fatalf("%+v %v", c, err)
	}
	if _, err := ParseConfig([]byte(`{"spec": {"maxBlocksPerHost": -1}}`)); err == nil {
		t.Fatal("negative maxBlocksPerHost accepted")
	}
	if f, err := ParseFamilies([]byte(`{"type": "calico-ipam"}`)); err != nil || f != (Families{IPv4: true}) {
		t.Fatalf("%+v %v", f, err)
	}
	if f, err := ParseFamilies([]byte(`{"type": "calico-ipam", "assign_ipv4": "false", "assign_ipv6": "true"}`)); err != nil || f != (Families{IPv6: true}) {
		t.Fatalf("%+v %v", f, err)
	}
	if _, err := ParseFamilies([]byte(`{"assign_ipv6": "yes"}`)); err == nil || !strings.Contains(err.Error(), "assign_ipv6") {
		t.Fatalf("%v", err)
	}
}

// TestCount: one /26 pool of /28 blocks (4 blocks of 16). Node a holds one
// block with 10 used; b holds one with 14 used, 2 of them borrowed by a.
func TestCount(t *testing.T) {
	pool := `{"metadata": {"name": "p"}, "spec": {"cidr": "10.0.0.0/26", "blockSize": 28}}`
	aBlock := blockJSON("10.0.0.0/28", "host:a", alloc("a", upTo(10)...))
	bAlloc := alloc("b", upTo(12)...)
	bAlloc[12], bAlloc[13] = "a", "a"
	bBlock := blockJSON("10.0.0.16/28", "host:b", bAlloc)
	v4 := Families{IPv4: true}
	for _, tc := range []struct {
		name       string
		cfg        Config
		used, free int64
	}{
		// own 6 free + 2 unclaimed blocks (32) + b's 2 free borrowable
		{"defaults", DefaultConfig, 12, 6 + 32 + 2},
		{"strict", Config{StrictAffinity: true, AutoAllocateBlocks: true}, 12, 6 + 32},
		{"max blocks 2", Config{StrictAffinity: true, AutoAllocateBlocks: true, MaxBlocksPerHost: 2}, 12, 6 + 16},
		{"max blocks 1", Config{StrictAffinity: true, AutoAllocateBlocks: true, MaxBlocksPerHost: 1}, 12, 6},
		{"max blocks 1 borrowing", Config{AutoAllocateBlocks: true, MaxBlocksPerHost: 1}, 12, 6 + 2},
		{"no auto allocation", Config{StrictAffinity: true}, 12, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			blocks := []Block{mustBlock(t, aBlock), mustBlock(t, bBlock)}
			u, err := Count("a", v4, blocks, []Pool{mustPool(t, pool)}, tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if u.Used != tc.used || u.Capacity-u.Used != tc.free {
				t.Fatalf("used %d free %d, want %d and %d (%+v)", u.Used, u.Capacity-u.Used, tc.used, tc.free, u.Families)
			}
		})
	}
	// Pods: the node's tunnel address is allocated, not a pod's; a
	// borrowed address is the node's pod's.
	holders := calicotest.Pods("a", 1, 3)
	holders[0] = calicotest.Holder{Node: "a"}
	b, _ := json.Marshal(calicotest.Block("10.0.0.0/28", "host:a", holders))
	u, err := Count("a", v4, []Block{mustBlock(t, b), mustBlock(t, bBlock)}, []Pool{mustPool(t, pool)}, DefaultConfig)
	if err != nil || u.Used != 4+2 || u.Pods != 3+2 {
		t.Fatalf("pods: %+v %v, want 6 used of which 5 pods'", u, err)
	}
	// A disabled pool: what is allocated counts, nothing more is reachable.
	disabled := mustPool(t, `{"spec": {"cidr": "10.0.0.0/26", "blockSize": 28, "disabled": true}}`)
	u, err = Count("a", v4, []Block{mustBlock(t, aBlock)}, []Pool{disabled}, DefaultConfig)
	if err != nil || u.Capacity != 10 || u.Used != 10 {
		t.Fatalf("disabled pool: %+v %v", u, err)
	}
	// Blocks of a tunnel-only pool are not pods'.
	tunnel := mustPool(t, `{"spec": {"cidr": "10.0.0.0/26", "blockSize": 28, "allowedUses": ["Tunnel"]}}`)
	if _, err := Count("a", v4, []Block{mustBlock(t, aBlock)}, []Pool{tunnel}, DefaultConfig); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("tunnel pool only: %v", err)
	}
	// Dual stack: the family with the fewest free.
	v6pool := mustPool(t, `{"spec": {"cidr": "fd00::/124", "blockSize": 124}}`)
	v6Block := mustBlock(t, blockJSON("fd00::/124", "host:a", alloc("a", upTo(15)...)))
	u, err = Count("a", Families{IPv4: true, IPv6: true}, []Block{mustBlock(t, aBlock), v6Block}, []Pool{mustPool(t, pool), v6pool}, DefaultConfig)
	if err != nil || u.Capacity != 16 || u.Used != 15 || len(u.Families) != 2 {
		t.Fatalf("dual stack: %+v %v", u, err)
	}
	// A huge IPv6 pool saturates, never overflows.
	huge := mustPool(t, `{"spec": {"cidr": "fd00::/48"}}`)
	u, err = Count("a", Families{IPv6: true}, nil, []Pool{huge}, DefaultConfig)
	if err != nil || u.Capacity != MaxCount || u.Used != 0 {
		t.Fatalf("huge pool: %+v %v", u, err)
	}
}

// TestSummarizeEveryNode: one summary of the cluster tells every node's
// figures, the node that holds no block included. The setup is TestCount's:
// a holds one block with 10 used and borrows 2 of b's 14.
func TestSummarizeEveryNode(t *testing.T) {
	pool := mustPool(t, `{"metadata": {"name": "p"}, "spec": {"cidr": "10.0.0.0/26", "blockSize": 28}}`)
	bAlloc := alloc("b", upTo(12)...)
	bAlloc[12], bAlloc[13] = "a", "a"
	blocks := []Block{mustBlock(t, blockJSON("10.0.0.0/28", "host:a", alloc("a", upTo(10)...))), mustBlock(t, blockJSON("10.0.0.16/28", "host:b", bAlloc))}
	c := Summarize(blocks, []Pool{pool}, DefaultConfig)
	if f := c.Families(); f != (Families{IPv4: true}) {
		t.Fatalf("families %+v", f)
	}
	for _, tc := range []struct {
		node       string
		used, free int64
	}{
		{"a", 12, 6 + 32 + 2}, // own 6 free, 2 unclaimed blocks, b's 2 free
		{"b", 14, 2 + 32 + 6}, // its block's 14 (2 lent to a), a's 6 free
		{"c", 0, 32 + 6 + 2},  // no block: what it may claim and borrow
	} {
		u, err := c.Usage(tc.node, c.Families())
		if err != nil {
			t.Fatal(err)
		}
		if u.Used != tc.used || u.Capacity-u.Used != tc.free {
			t.Errorf("%s: used %d free %d, want %d and %d (%+v)", tc.node, u.Used, u.Capacity-u.Used, tc.used, tc.free, u.Families)
		}
	}
}

// FuzzParse feeds arbitrary objects to the parsers and the cluster's
// summary: for every node they name, an error or figures with
// 0 ≤ used ≤ capacity ≤ MaxCount and no negative part, never a panic.
func FuzzParse(f *testing.F) {
	f.Add(blockJSON("10.0.0.0/28", "host:a", alloc("a", 0, 1)), []byte(`{"spec": {"cidr": "10.0.0.0/26", "blockSize": 28}}`), []byte(`{"spec": {"maxBlocksPerHost": 1}}`))
	f.Add(blockJSON("fd00::/124", "host:b", alloc("a", 3)), []byte(`{"spec": {"cidr": "fd00::/48"}}`), []byte(`{"spec": {"strictAffinity": true}}`))
	f.Add([]byte(`{"spec": {"cidr": "10.0.0.0/31", "allocations": [0, null], "attributes": [{"secondary": {"node": "a"}}], "unallocated": [1]}}`), []byte(`{"spec": {"cidr": "0.0.0.0/0", "blockSize": 20}}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, block, pool, cfg []byte) {
		blk, err := ParseBlock(block)
		if err != nil {
			return
		}
		p, err := ParsePool(pool)
		if err != nil {
			return
		}
		c, err := ParseConfig(cfg)
		if err != nil {
			return
		}
		cluster := Summarize([]Block{blk, blk}, []Pool{p, p}, c)
		nodes := []string{"a", blk.Owner()}
		for n := range blk.Lent {
			nodes = append(nodes, n)
		}
		for _, node := range nodes {
			u, err := cluster.Usage(node, Families{IPv4: true, IPv6: true})
			if err != nil {
				continue
			}
			if u.Used < 0 || u.Used > u.Capacity || u.Capacity > MaxCount {
				t.Fatalf("%s: used %d, capacity %d", node, u.Used, u.Capacity)
			}
			for _, f := range u.Families {
				if f.Borrowable < 0 || f.Claimable < 0 || f.FreeInBlocks < 0 {
					t.Fatalf("%s: negative free %+v", node, f)
				}
			}
		}
	})
}

// BenchmarkParseBlock: what each agent spends per IPAMBlock write in the
// cluster (the watch's transform parses every block it receives): a full
// /26, Calico's default block.
func BenchmarkParseBlock(b *testing.B) {
	blk := blockJSON("10.244.0.0/26", "host:other", alloc("other", upTo(64)...))
	b.SetBytes(int64(len(blk)))
	for b.Loop() {
		if _, err := ParseBlock(blk); err != nil {
			b.Fatal(err)
		}
	}
}
