package trace

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// stringColumn decodes a string column (dictionary-encoded or plain) into one int32 code per
// row, without allocating per row. For op, memory and layer the code is the enum value; for
// function it indexes names.
type stringColumn struct {
	parse func(string) (int32, error)
	cache map[string]int32 // plain string value → code
	dict  arrow.ArrayData  // dictionary that table was built for (retained)
	table []int32          // dictionary index → code, -1 when the value is invalid
	codes []int32          // per-row scratch, reused across batches
	names []string         // function names by code (function column only)
	index map[string]int32 // name → code (function column only)
}

func newEnumColumn(parse func(string) (int32, error)) *stringColumn {
	return &stringColumn{parse: parse, cache: map[string]int32{}}
}

func newFunctionColumn() *stringColumn {
	c := &stringColumn{cache: map[string]int32{}, index: map[string]int32{}}
	c.parse = func(v string) (int32, error) {
		if code, ok := c.index[v]; ok {
			return code, nil
		}
		v = string([]byte(v)) // copy: v may point into an Arrow buffer
		code := int32(len(c.names))
		c.names = append(c.names, v)
		c.index[v] = code
		return code, nil
	}
	return c
}

func (c *stringColumn) release() {
	if c.dict != nil {
		c.dict.Release()
		c.dict = nil
	}
}

// decode returns the codes of the rows of arr, valid until the next call.
func (c *stringColumn) decode(arr arrow.Array, name string, rows int) ([]int32, error) {
	if err := checkShape(arr, name, rows); err != nil {
		return nil, err
	}
	if cap(c.codes) < rows {
		c.codes = make([]int32, rows)
	}
	codes := c.codes[:rows]
	switch a := arr.(type) {
	case *array.Dictionary:
		return codes, c.decodeDictionary(a, name, codes)
	case *array.String:
		return codes, c.decodePlain(a, name, codes)
	case *array.LargeString:
		return codes, c.decodePlain(a, name, codes)
	}
	return nil, fmt.Errorf("column %q has type %s", name, arr.DataType())
}

type stringValues interface {
	Len() int
	Value(i int) string
}

func (c *stringColumn) decodePlain(a stringValues, name string, codes []int32) error {
	for i := range codes {
		v := a.Value(i)
		code, ok := c.cache[v]
		if !ok {
			var err error
			if code, err = c.parse(v); err != nil {
				return &rowError{i, fmt.Sprintf("column %q: %v", name, err)}
			}
			c.cache[string([]byte(v))] = code
		}
		codes[i] = code
	}
	return nil
}

func (c *stringColumn) decodeDictionary(a *array.Dictionary, name string, codes []int32) error {
	dict := a.Dictionary()
	if dict.Data() != c.dict {
		if err := c.buildTable(dict, name); err != nil {
			return err
		}
	}
	indices := a.Indices()
	defer indices.Release()
	var bad int
	switch ix := indices.(type) {
	case *array.Int8:
		bad = mapIndices(ix.Int8Values(), c.table, codes)
	case *array.Int16:
		bad = mapIndices(ix.Int16Values(), c.table, codes)
	case *array.Int32:
		bad = mapIndices(ix.Int32Values(), c.table, codes)
	case *array.Int64:
		bad = mapIndices(ix.Int64Values(), c.table, codes)
	case *array.Uint8:
		bad = mapIndices(ix.Uint8Values(), c.table, codes)
	case *array.Uint16:
		bad = mapIndices(ix.Uint16Values(), c.table, codes)
	case *array.Uint32:
		bad = mapIndices(ix.Uint32Values(), c.table, codes)
	case *array.Uint64:
		bad = mapIndices(ix.Uint64Values(), c.table, codes)
	default:
		return fmt.Errorf("column %q: dictionary index type %s", name, indices.DataType())
	}
	if bad >= 0 {
		j := a.GetValueIndex(bad)
		if j < 0 || j >= dict.Len() {
			return &rowError{bad, fmt.Sprintf("column %q: dictionary index %d out of range [0,%d)", name, j, dict.Len())}
		}
		_, err := c.parse(dictValue(dict, j))
		return &rowError{bad, fmt.Sprintf("column %q: %v", name, err)}
	}
	return nil
}

// buildTable maps every entry of dict to its code.
func (c *stringColumn) buildTable(dict arrow.Array, name string) error {
	switch dict.(type) {
	case *array.String, *array.LargeString:
	default:
		return fmt.Errorf("column %q: dictionary of %s", name, dict.DataType())
	}
	c.release()
	c.table = c.table[:0]
	for j := 0; j < dict.Len(); j++ {
		code := int32(-1)
		if dict.IsValid(j) {
			if v, err := c.parse(dictValue(dict, j)); err == nil {
				code = v
			}
		}
		c.table = append(c.table, code)
	}
	c.dict = dict.Data()
	c.dict.Retain()
	return nil
}

func dictValue(dict arrow.Array, j int) string {
	if s, ok := dict.(stringValues); ok && dict.IsValid(j) {
		return s.Value(j)
	}
	return ""
}

type index interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// mapIndices sets codes[i] = table[idx[i]] and returns the first row whose index is out of
// range or maps to an invalid value, or -1.
func mapIndices[T index](idx []T, table []int32, codes []int32) int {
	idx = idx[:len(codes)]
	n := uint64(len(table))
	for i, x := range idx {
		if uint64(x) >= n {
			return i
		}
		code := table[x]
		if code < 0 {
			return i
		}
		codes[i] = code
	}
	return -1
}
