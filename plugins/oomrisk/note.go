package oomrisk

import (
	"sync"

	"github.com/headroom-k8s/headroom/plugins/internal/nodecache"
)

// shapeIDs numbers the memory shapes of the pods PreScore sees, so that a
// node keeps the score of the last shape scored on it in one word beside
// its summary (scoreNote): 24 bits of shape, 8 of score. Pods' shapes are
// the tenants' to choose, so the table is bounded: once it holds
// maxShapesKept it starts afresh, and a shape seen again takes a new
// number. Numbers are never reused, so a node's note never answers for
// another shape; once 2^24 are spent, pods are scored without notes.
type shapeIDs struct {
	mu   sync.Mutex
	ids  map[string]uint32
	last uint32
}

const (
	maxShapeID    = 1<<24 - 1
	maxShapesKept = 4096
)

// id returns shape's number, 0 for none.
func (t *shapeIDs) id(shape string) uint32 {
	if shape == "" {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.ids[shape]; ok {
		return id
	}
	if t.last >= maxShapeID {
		return 0
	}
	if t.ids == nil || len(t.ids) >= maxShapesKept {
		t.ids = make(map[string]uint32)
	}
	t.last++
	t.ids[shape] = t.last
	return t.last
}

// noted returns the score the node's note keeps for the pod's shape.
func (s *preScoreState) noted(n nodecache.Note) (int64, bool) {
	w, ok := n.Load()
	if !ok || s.shape == 0 || w>>8 != s.shape {
		return 0, false
	}
	return int64(w & 0xff), true
}

// note keeps score for the pod's shape in the node's note.
func (s *preScoreState) note(n nodecache.Note, score int64) {
	if s.shape != 0 && score >= 0 && score <= 0xff {
		n.Store(s.shape<<8 | uint32(score))
	}
}
