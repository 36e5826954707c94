"""One reader per upstream measurement source, each turning the files as they are upstream into rows
of the kernel-measurement table (:mod:`lilou.data.kernel_table`)."""
