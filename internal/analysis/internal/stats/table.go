package stats

import "github.com/allocscope/allocscope/internal/addrindex"

// Table maps block keys to values: the address index (internal/addrindex), one per process and
// device, so that an operation hashes and compares a bare address. A trace's events come mostly
// from one process and device, so the index of the last one is kept at hand, without a map lookup.
type Table[V any] struct {
	indexes map[space]*addrindex.Index[V]
	last    *addrindex.Index[V] // the index of lastKey's space; nil before the first operation
	lastKey space
	n       int
}

// space is the process and device an address lies in.
type space struct {
	pid    uint32
	device int32
}

// index returns the address index of k's process and device, creating it the first time.
func (t *Table[V]) index(k Key) *addrindex.Index[V] {
	if s := (space{k.PID, k.Device}); t.last == nil || s != t.lastKey {
		t.last, t.lastKey = t.spaceIndex(s), s
	}
	return t.last
}

// spaceIndex returns the address index of space s, creating it the first time.
func (t *Table[V]) spaceIndex(s space) *addrindex.Index[V] {
	x, ok := t.indexes[s]
	if !ok {
		if t.indexes == nil {
			t.indexes = map[space]*addrindex.Index[V]{}
		}
		x = &addrindex.Index[V]{}
		t.indexes[s] = x
	}
	return x
}

// Len returns the number of keys.
func (t *Table[V]) Len() int { return t.n }

// Put sets k to v and returns the value it replaces, if any.
func (t *Table[V]) Put(k Key, v V) (old V, replaced bool) {
	old, replaced = t.index(k).Put(k.Addr, v)
	if !replaced {
		t.n++
	}
	return old, replaced
}

// Get returns the value of k.
func (t *Table[V]) Get(k Key) (V, bool) {
	if p := t.index(k).Get(k.Addr); p != nil {
		return *p, true
	}
	var zero V
	return zero, false
}

// Delete removes k and returns its value.
func (t *Table[V]) Delete(k Key) (V, bool) {
	v, ok := t.index(k).Take(k.Addr)
	if ok {
		t.n--
	}
	return v, ok
}

// All calls f for every key and value, in no particular order.
func (t *Table[V]) All(f func(Key, V)) {
	for s, x := range t.indexes {
		x.Each(func(addr uint64, v *V) { f(Key{PID: s.pid, Device: s.device, Addr: addr}, *v) })
	}
}
