"""The dashboard's own widgets: the virtualised table, summary bar, age histogram, drill list."""
