"""What automatic clustering will cost a table (docs/commands.md#recluster-estimate): the shape of its appends learned
from the log (`shape`), the product's own selection run over synthetic appends of that shape in a table model (`model`,
`project`), and the projection in the table's units (`projection`). Pure: no I/O."""
