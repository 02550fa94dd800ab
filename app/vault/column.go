package vault

// Column is one database column holding sealed values, as a key rotation
// (modules/rekey) walks it. The module that seals into a column declares
// it, since only it knows the contexts its values are bound to; a test
// holds the declarations against the schema, so a new column of sealed
// values cannot be left out of a rotation.
type Column struct {
	// Table and Column name the column.
	Table, Column string
	// Tenant says the table is under row-level security: it is walked
	// tenant by tenant.
	Tenant bool
	// TextPrefix is set for a text column: a sealed value is TextPrefix
	// followed by the sealed bytes in unpadded standard base64; a value
	// without the prefix is not sealed and is left alone.
	TextPrefix string
	// Select returns the column's values as three columns: the row's id
	// (text), the text its contexts are computed from (Contexts' material),
	// and the value; NULLs excluded.
	Select string
	// Contexts returns the contexts a row's value may be bound to, the
	// current one first (older rows may carry an older one).
	Contexts func(id, material string) []string
	// Update stores a value re-sealed: $1 the id, $2 the value as read, $3
	// the new value; it changes nothing when the row changed meanwhile.
	Update string
}
