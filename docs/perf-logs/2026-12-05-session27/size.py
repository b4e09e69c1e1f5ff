import struct,sys
d=open(sys.argv[1],'rb').read(); d=d[d.find(b'\x7fELF'):]
shoff=struct.unpack_from('<Q',d,0x28)[0]; shentsize,shnum,shstrndx=struct.unpack_from('<HHH',d,0x3A)
secs=[struct.unpack_from('<IIQQQQIIQQ',d,shoff+i*shentsize) for i in range(shnum)]
stroff=secs[shstrndx][4]
def name(n):
    e=d.index(b'\0',stroff+n); return d[stroff+n:e].decode()
for s in secs:
    n=name(s[0])
    if n.startswith('.text.'): print(n[6:][:60], s[5]//16, 'instructions')
