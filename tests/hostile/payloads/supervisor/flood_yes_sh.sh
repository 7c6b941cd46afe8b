# Output flood: yes writes "y\n" as fast as the pipe takes it, forever.
exec yes
