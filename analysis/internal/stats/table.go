package stats

import "math/bits"

// Table maps block keys to values: an open-addressing hash table with linear probing and
// backward-shift deletion. It hashes a key once per operation, which Go maps with a struct key
// do not offer for insert-or-replace and lookup-and-delete; the statistics and simulation passes
// do one of those per event. It is not shared with pool's address index (pool/internal/addrindex,
// keyed by a bare address): a table generic over its key hashes through a method of the key type,
// which Go calls through the instantiation's dictionary, not inlined, costing about 1 ns a lookup.
type Table[V any] struct {
	slots []tableSlot[V]
	n     int
	mask  uint64
	shift uint8 // 64 - log2(len(slots))
}

type tableSlot[V any] struct {
	key  Key
	home uint32 // slot the key hashes to, plus one; 0 marks an empty slot
	val  V
}

// hashKey hashes k multiplicatively (Fibonacci hashing); a table takes the top bits, which
// depend on every bit of the key (addresses differ mostly in their middle bits).
func hashKey(k Key) uint64 {
	return (k.Addr ^ uint64(k.PID)<<32 ^ uint64(uint32(k.Device))<<56) * 0x9e3779b97f4a7c15
}

// home returns the slot k hashes to.
func (t *Table[V]) home(k Key) uint64 { return hashKey(k) >> t.shift }

// Len returns the number of keys.
func (t *Table[V]) Len() int { return t.n }

func (t *Table[V]) find(k Key) (uint64, bool) {
	return t.findFrom(k, t.home(k))
}

// findFrom probes for k from its home slot i.
func (t *Table[V]) findFrom(k Key, i uint64) (uint64, bool) {
	for {
		s := &t.slots[i]
		if s.home == 0 {
			return i, false
		}
		if s.key == k {
			return i, true
		}
		i = (i + 1) & t.mask
	}
}

// Put sets k to v and returns the value it replaces, if any.
func (t *Table[V]) Put(k Key, v V) (old V, replaced bool) {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	home := t.home(k)
	i, ok := t.findFrom(k, home)
	s := &t.slots[i]
	if ok {
		old, s.val = s.val, v
		return old, true
	}
	s.key, s.home, s.val = k, uint32(home)+1, v
	t.n++
	return old, false
}

// Get returns the value of k.
func (t *Table[V]) Get(k Key) (V, bool) {
	var zero V
	if t.n == 0 {
		return zero, false
	}
	i, ok := t.find(k)
	if !ok {
		return zero, false
	}
	return t.slots[i].val, true
}

// Delete removes k and returns its value.
func (t *Table[V]) Delete(k Key) (V, bool) {
	var zero V
	if t.n == 0 {
		return zero, false
	}
	i, ok := t.find(k)
	if !ok {
		return zero, false
	}
	slots, mask := t.slots, t.mask
	v := slots[i].val
	// Backward-shift: move later entries of the probe run into the hole.
	for j := (i + 1) & mask; ; j = (j + 1) & mask {
		h := slots[j].home
		if h == 0 {
			break
		}
		if (j-uint64(h-1))&mask >= (j-i)&mask {
			slots[i] = slots[j]
			i = j
		}
	}
	slots[i].home = 0
	t.n--
	return v, true
}

// All calls f for every key and value, in no particular order.
func (t *Table[V]) All(f func(Key, V)) {
	for i := range t.slots {
		if t.slots[i].home != 0 {
			f(t.slots[i].key, t.slots[i].val)
		}
	}
}

func (t *Table[V]) grow() {
	old := t.slots
	size := max(64, 2*len(old))
	t.slots, t.mask, t.n = make([]tableSlot[V], size), uint64(size-1), 0
	t.shift = uint8(64 - bits.Len(uint(size-1)))
	for i := range old {
		if old[i].home != 0 {
			t.Put(old[i].key, old[i].val)
		}
	}
}
