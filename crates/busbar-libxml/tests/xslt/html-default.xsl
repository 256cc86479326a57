<?xml version="1.0"?>
<!-- No xsl:output: an unqualified html root selects the html method by default. -->
<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform">
  <xsl:template match="/">
    <html><body><p><xsl:value-of select="count(//order)"/> orders</p><hr/></body></html>
  </xsl:template>
</xsl:stylesheet>
